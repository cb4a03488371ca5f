//! One request to many shards at once: a test of hundreds of shards must not wait out one
//! slow shard's timeout after another within a reconcile.

use crate::names::SHARD_PORT;
use futures_util::StreamExt;
use std::future::Future;
use std::time::Duration;
use wsload_control::Token;
use wsload_control::client::ShardClient;
use wsload_http::http_client::Client;

/// Requests in flight at most.
const CONCURRENCY: usize = 32;

/// Calls `call` on every shard of `targets` (index, pod IP) through `http`, with the test's
/// `token`, at most [`CONCURRENCY`] at a time; the answers by shard index, in no particular
/// order.
pub(super) async fn each<T, F, Fut>(
    http: &Client,
    token: &Token,
    targets: &[(u32, String)],
    timeout: Duration,
    call: F,
) -> Vec<(u32, T)>
where
    F: Fn(ShardClient) -> Fut,
    Fut: Future<Output = T>,
{
    each_indexed(http, token, targets, timeout, |_, c| call(c)).await
}

/// [`each`] with `call` told which shard it calls: for a request whose body differs by shard
/// (each one's release instant on its own clock).
pub(super) async fn each_indexed<T, F, Fut>(
    http: &Client,
    token: &Token,
    targets: &[(u32, String)],
    timeout: Duration,
    call: F,
) -> Vec<(u32, T)>
where
    F: Fn(u32, ShardClient) -> Fut,
    Fut: Future<Output = T>,
{
    // Futures built up front, owning what they need: a stream mapping borrowed items with a
    // closure makes the reconcile future's Send-ness depend on higher-ranked lifetimes the
    // compiler cannot prove.
    let calls: Vec<_> = targets
        .iter()
        .map(|(i, ip)| {
            let i = *i;
            let answer = call(
                i,
                ShardClient::with_http(http.clone(), ip, SHARD_PORT, token.clone(), timeout),
            );
            async move { (i, answer.await) }
        })
        .collect();
    bounded(calls).await
}

/// Runs `calls`, at most [`CONCURRENCY`] at a time; their outputs in completion order.
pub(super) async fn bounded<T, Fut>(calls: Vec<Fut>) -> Vec<T>
where
    Fut: Future<Output = T>,
{
    futures_util::stream::iter(calls)
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await
}
