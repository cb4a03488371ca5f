//! `wsload sysctl KEY=VALUE...`: what the operator's opt-in tuning init container runs
//! (`spec.loadgen.tuning.sysctls`, privileged), so the FROM-scratch image needs no sysctl(8);
//! and reading a sysctl back, for the line a shard prints of the limits it runs under.

use std::path::PathBuf;

/// Why a sysctl cannot be set or read.
#[derive(Debug, thiserror::Error)]
pub enum SysctlError {
    /// Not a name sysctl(8) takes: the input's fault.
    #[error("{key:?} is not a sysctl name")]
    Name { key: String },
    /// Not `KEY=VALUE`: the input's fault.
    #[error("{setting:?}: write KEY=VALUE")]
    Setting { setting: String },
    #[error("cannot set {key}={value}: {source}")]
    Write {
        key: String,
        value: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read {key}: {source}")]
    Read {
        key: String,
        #[source]
        source: std::io::Error,
    },
}

impl SysctlError {
    /// Whether the input is at fault (else this machine).
    pub fn is_input(&self) -> bool {
        matches!(self, SysctlError::Name { .. } | SysctlError::Setting { .. })
    }
}

/// The `/proc/sys` file of `key`: dots separate levels as in sysctl(8), unless the key is
/// written with slashes (for names that contain dots, e.g. VLAN interfaces).
pub fn path(key: &str) -> Result<PathBuf, SysctlError> {
    let ok = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '/' | '_' | '-'))
        && !key
            .split(['.', '/'])
            .any(|part| part.is_empty() || part == "..");
    if !ok {
        return Err(SysctlError::Name {
            key: key.to_string(),
        });
    }
    let relative = if key.contains('/') {
        key.to_string()
    } else {
        key.replace('.', "/")
    };
    Ok(PathBuf::from("/proc/sys").join(relative))
}

/// Sets every `KEY=VALUE` of `settings`, in order; stops at the first that fails.
pub fn set_all(settings: &[String]) -> Result<(), SysctlError> {
    for s in settings {
        let (key, value) = s.split_once('=').ok_or_else(|| SysctlError::Setting {
            setting: s.to_string(),
        })?;
        let (key, value) = (key.trim(), value.trim());
        std::fs::write(path(key)?, value).map_err(|source| SysctlError::Write {
            key: key.to_string(),
            value: value.to_string(),
            source,
        })?;
        println!("{key} = {value}");
    }
    Ok(())
}

/// The value of `key` in force in this process's namespaces, in [`words`].
pub fn read(key: &str) -> Result<String, SysctlError> {
    let text = std::fs::read_to_string(path(key)?).map_err(|source| SysctlError::Read {
        key: key.to_string(),
        source,
    })?;
    Ok(words(&text))
}

/// `value`'s words separated by one space: `/proc/sys` separates some with tabs
/// (`ip_local_port_range`), a spec with spaces, and both mean the same setting.
pub fn words(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_into_proc_sys_and_nowhere_else() {
        assert_eq!(
            path("net.core.somaxconn").expect("valid"),
            PathBuf::from("/proc/sys/net/core/somaxconn")
        );
        assert_eq!(
            path("net/ipv4/conf/eth0.100/rp_filter").expect("valid"),
            PathBuf::from("/proc/sys/net/ipv4/conf/eth0.100/rp_filter")
        );
        for bad in [
            "",
            "net..core",
            "../etc/passwd",
            "net/../../etc",
            "/net/core",
            "a b",
        ] {
            assert!(path(bad).is_err(), "{bad:?}");
        }
        assert!(set_all(&["net.core.somaxconn".into()]).is_err());
    }

    #[test]
    fn a_value_reads_back_in_single_spaced_words() {
        assert_eq!(words("32768\t60999\n"), "32768 60999");
        assert_eq!(words(" 1024   65535 "), "1024 65535");
        // Every Linux has this one, readable by anyone.
        let range = read("net.ipv4.ip_local_port_range").expect("readable");
        let ports: Vec<u32> = range
            .split(' ')
            .map(|p| p.parse().expect("a port"))
            .collect();
        assert!(ports.len() == 2 && ports[0] <= ports[1], "{range}");
        assert!(read("net.no_such_sysctl").is_err());
    }
}
