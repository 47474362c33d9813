//! Who this process is: the host name and the default lease owner its commands and
//! simulated workers name.

/// The canary's default owner: `heart-fleet:<hostname>:<pid>`.
pub fn default_owner() -> String {
    format!("heart-fleet:{}:{}", hostname(), std::process::id())
}

/// This machine's host name (`/proc/sys/kernel/hostname`, `$HOSTNAME`, else `host`).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "host".to_owned())
}
