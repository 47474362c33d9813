//! `keygen`: a fleet key file (HMAC-SHA-256 or Ed25519).

use std::io::Write;

use super::session::fail;
use crate::Exit;
use crate::cli::KeygenArgs;
use crate::keys;

/// `keygen`: writes the key file(s) and prints what was written.
pub fn keygen(args: &KeygenArgs, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    match keys::keygen(args.kind, &args.out, args.public_out.as_deref()) {
        Ok(lines) => match lines.iter().try_for_each(|l| writeln!(out, "{l}")).and_then(|()| out.flush()) {
            Ok(()) => Exit::Success,
            Err(e) => crate::io_failure(err, &e),
        },
        Err(e) => fail(err, Exit::Error, format!("keygen: {e}")),
    }
}
