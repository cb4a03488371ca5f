//! Test harness for the operator's integration tests: a real kube-apiserver + etcd per test
//! binary ([`cluster`]) and a fake kubelet that runs pods as local processes on loopback
//! addresses ([`kubelet`]). Include it from a test file with `mod support;`.

// Each test binary compiles this module on its own and uses only part of it.
#![allow(dead_code, unused_imports)]

pub mod cluster;
// pub mod kubelet;

pub use cluster::{Cluster, shared};
// pub use kubelet::{Kubelet, KubeletOpts, PodProcess};
