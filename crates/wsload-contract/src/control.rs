//! Where a shard pod finds its test's control token: the operator mounts the test's Secret
//! (`<loadtest>-control`, key [`TOKEN_KEY`]) read-only at [`TOKEN_DIR`] and names the file in
//! [`crate::env::CONTROL_TOKEN_FILE`]; the shard reads it once at start.

/// The Secret's key holding the token, which is also the file's name in the mounted volume.
pub const TOKEN_KEY: &str = "token";

/// Where the Secret is mounted in a shard pod's container.
pub const TOKEN_DIR: &str = "/var/run/wsload/control";

/// The token file's path in a shard pod: [`TOKEN_DIR`]/[`TOKEN_KEY`].
pub fn token_path() -> String {
    format!("{TOKEN_DIR}/{TOKEN_KEY}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_the_key_in_the_mounted_directory() {
        assert_eq!(token_path(), "/var/run/wsload/control/token");
    }
}
