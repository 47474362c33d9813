//! Fleet keys on disk: reading key files (`--signing-key`, `--key`, `--public-key`,
//! `$HEART_FLEET_SIGNING_KEY`) and writing new ones (`keygen`).
//!
//! A key file holds one line, `KIND:HEX` ([`FleetKey::to_key_file_text`]). Every message here
//! names the file and what is wrong with it, never the key's bytes; `keygen` writes secret
//! keys with mode 0600 and never over an existing file.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use heart_fleet_core::chain::{FleetKey, Signer, VerifyKeys};

/// The environment variable that may hold a signing key's text (as a key file holds it), for
/// hosts where a secret arrives in the environment rather than as a file.
pub const SIGNING_KEY_ENV: &str = "HEART_FLEET_SIGNING_KEY";

/// Reads the key in `path`. The error names the file, never the key.
pub fn read_key_file(path: &Path) -> Result<FleetKey, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("key file {}: cannot read it: {e}", path.display()))?;
    if text.trim().is_empty() {
        return Err(format!("key file {} is empty", path.display()));
    }
    FleetKey::parse(&text).map_err(|e| format!("key file {}: {}", path.display(), e.message))
}

/// The signer of a command: the keys of `files` and of `env` (the text of
/// [`SIGNING_KEY_ENV`], if set), at most one per kind; no key signs nothing (chains are still
/// written).
pub fn signer(files: &[PathBuf], env: Option<&str>) -> Result<Arc<Signer>, String> {
    let mut signer = Signer::unsigned();
    for path in files {
        let key = read_key_file(path)?;
        signer = signer.with_key(key).map_err(|e| format!("--signing-key {}: {}", path.display(), e.message))?;
    }
    if let Some(text) = env {
        let key = FleetKey::parse(text).map_err(|e| format!("${SIGNING_KEY_ENV}: {}", e.message))?;
        signer = signer.with_key(key).map_err(|e| format!("${SIGNING_KEY_ENV}: {}", e.message))?;
    }
    Ok(Arc::new(signer))
}

/// The signer of a command or worker: the key files given (`--signing-key`) and
/// `$HEART_FLEET_SIGNING_KEY`, if set.
pub fn fleet_signer(files: &[PathBuf]) -> Result<Arc<Signer>, String> {
    let env = std::env::var(SIGNING_KEY_ENV).ok();
    signer(files, env.as_deref())
}

/// The keys of `verify-receipts --key FILE --public-key FILE`.
pub fn verify_keys(hmac: Option<&Path>, public: Option<&Path>) -> Result<VerifyKeys, String> {
    let mut keys = VerifyKeys::none();
    if let Some(path) = hmac {
        keys = keys.with_hmac(read_key_file(path)?).map_err(|e| format!("--key {}: {}", path.display(), e.message))?;
    }
    if let Some(path) = public {
        keys = keys
            .with_public_key(read_key_file(path)?)
            .map_err(|e| format!("--public-key {}: {}", path.display(), e.message))?;
    }
    Ok(keys)
}

/// The kinds of key `keygen` makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KeyKind {
    /// A shared HMAC-SHA-256 key: every writer and every verifier holds the same secret.
    Hmac,
    /// An Ed25519 key pair: writers hold the secret key, verifiers only the public one.
    Ed25519,
}

/// Writes a new key of `kind` to `out` (mode 0600) and, for Ed25519, its public key to
/// `public_out` (mode 0644). Refuses to overwrite either file. Returns what it wrote, for the
/// command's output (file names only).
pub fn keygen(kind: KeyKind, out: &Path, public_out: Option<&Path>) -> Result<Vec<String>, String> {
    let seed = random_32()?;
    let key = match kind {
        KeyKind::Hmac => FleetKey::hmac_from_random(seed),
        KeyKind::Ed25519 => FleetKey::ed25519_from_seed(seed),
    };
    let public = match (kind, public_out) {
        (KeyKind::Hmac, Some(_)) => {
            return Err("--public-out is for ed25519 keys; an HMAC key has no public half".into());
        }
        (KeyKind::Hmac, None) => None,
        (KeyKind::Ed25519, path) => {
            let path = path.map_or_else(|| PathBuf::from(format!("{}.pub", out.display())), Path::to_path_buf);
            key.public_key().map(|k| (path, k))
        }
    };
    if let Some((path, _)) = &public
        && path.exists()
    {
        return Err(format!("{} exists; keygen never overwrites a key file", path.display()));
    }
    write_new(out, &key.to_key_file_text(), 0o600)?;
    let mut wrote = vec![format!("wrote {} to {} (mode 0600)", key.kind(), out.display())];
    if let Some((path, public)) = public {
        write_new(&path, &public.to_key_file_text(), 0o644)?;
        wrote.push(format!("wrote {} to {} (give it to verifiers)", public.kind(), path.display()));
    }
    Ok(wrote)
}

fn write_new(path: &Path, text: &str, mode: u32) -> Result<(), String> {
    let mut file = OpenOptions::new().write(true).create_new(true).mode(mode).open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            format!("{} exists; keygen never overwrites a key file", path.display())
        } else {
            format!("cannot create {}: {e}", path.display())
        }
    })?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// 32 bytes from the kernel's random source (the core draws no random number).
fn random_32() -> Result<[u8; 32], String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
    Ok(bytes)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("hf-keys-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn keygen_writes_private_files_that_read_back_and_never_overwrites() {
        let d = dir("gen");
        let secret = d.join("fleet.key");
        let wrote = keygen(KeyKind::Ed25519, &secret, None).unwrap();
        assert_eq!(wrote.len(), 2);
        let mode = std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let public = d.join("fleet.key.pub");
        assert!(matches!(read_key_file(&secret).unwrap(), FleetKey::Ed25519Secret(_)));
        assert!(matches!(read_key_file(&public).unwrap(), FleetKey::Ed25519Public(_)));
        let before = std::fs::read(&secret).unwrap();
        let e = keygen(KeyKind::Ed25519, &secret, Some(&d.join("other.pub"))).unwrap_err();
        assert!(e.contains("never overwrites"), "{e}");
        assert_eq!(std::fs::read(&secret).unwrap(), before);
        assert!(!d.join("other.pub").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn bad_key_files_name_the_file_and_never_the_key() {
        let d = dir("bad");
        let empty = d.join("empty.key");
        std::fs::write(&empty, "\n").unwrap();
        assert_eq!(read_key_file(&empty).unwrap_err(), format!("key file {} is empty", empty.display()));
        let missing = d.join("missing.key");
        assert!(
            read_key_file(&missing)
                .unwrap_err()
                .starts_with(&format!("key file {}: cannot read it", missing.display()))
        );
        let hmac = d.join("hmac.key");
        keygen(KeyKind::Hmac, &hmac, None).unwrap();
        let text = std::fs::read_to_string(&hmac).unwrap();
        let hex = text.trim().split_once(':').unwrap().1.to_owned();
        // An HMAC key where a public key is needed, and a public key where a signing key is.
        let e = verify_keys(None, Some(&hmac)).unwrap_err();
        assert!(e.starts_with(&format!("--public-key {}: ", hmac.display())), "{e}");
        assert!(!e.contains(&hex));
        let ed = d.join("ed.key");
        keygen(KeyKind::Ed25519, &ed, None).unwrap();
        let e = signer(&[d.join("ed.key.pub")], None).unwrap_err();
        assert!(e.contains("cannot sign"), "{e}");
        let e = signer(&[], Some("heart-fleet-hmac-sha256-key:zz")).unwrap_err();
        assert_eq!(e, format!("${SIGNING_KEY_ENV}: the heart-fleet-hmac-sha256-key is not hex"));
        let both = signer(&[hmac.clone(), ed.clone()], None).unwrap();
        assert!(both.signs());
        let e = signer(std::slice::from_ref(&hmac), Some(&text)).unwrap_err();
        assert!(e.contains("two HMAC signing keys") && !e.contains(&hex), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
