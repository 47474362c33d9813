//! `canonicalize` and `digest`: JSON documents, one per line, to their canonical form
//! ([`canonical::canonicalize_json`]) or its digest ([`canonical::digest_json`]), one output
//! line per input document.
//!
//! Blank (whitespace-only) lines are skipped; a trailing `\r` is ignored. The first line
//! that is not valid JSON (or not UTF-8, or holds a number that overflows a double, such
//! as `1e400`) stops the command: `heart-fleet: canonicalize: stdin line N: MESSAGE` (or
//! `digest`) goes to standard error, nothing more is read, and the exit status is 1.
//! Stopping keeps the output aligned with the input: output line *k* always belongs to the
//! *k*-th non-blank input line. Standard input that cannot be read is
//! `heart-fleet: canonicalize: cannot read stdin: …`, exit 2 (a closed output pipe is not
//! reported).

use std::io::{self, BufRead, Write};

use heart_fleet_core::canonical::{self, CanonicalError};

use crate::Exit;

/// Which form to print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// The canonical JSON text.
    Canonical,
    /// `sha256:dreamnet-sorted-json:v0:` + the SHA-256 of the canonical text.
    Digest,
}

impl Form {
    /// The command's name.
    pub fn command(self) -> &'static str {
        match self {
            Form::Canonical => "canonicalize",
            Form::Digest => "digest",
        }
    }

    fn apply(self, text: &str) -> Result<String, CanonicalError> {
        match self {
            Form::Canonical => canonical::canonicalize_json(text),
            Form::Digest => canonical::digest_json(text),
        }
    }
}

/// A line that stopped the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine {
    /// Its 1-based number, counting blank lines.
    pub line: u64,
    /// Why.
    pub message: String,
}

/// An I/O error of `canonicalize` / `digest`, by stream.
#[derive(Debug)]
pub enum StreamError {
    /// Standard input could not be read.
    Read(io::Error),
    /// Standard output could not be written.
    Write(io::Error),
}

/// Transforms every document of `input` into `out`. `Ok(Err(bad))` when a line is bad
/// (everything before it was written); `Err` on an I/O error of either stream.
pub fn transform(
    form: Form,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
) -> Result<Result<u64, BadLine>, StreamError> {
    let mut buf = Vec::new();
    let mut number = 0u64;
    let mut done = 0u64;
    loop {
        buf.clear();
        if input.read_until(b'\n', &mut buf).map_err(StreamError::Read)? == 0 {
            return Ok(Ok(done));
        }
        number += 1;
        let bytes = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        if bytes.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let text = match std::str::from_utf8(bytes) {
            Ok(t) => t,
            Err(e) => return Ok(Err(BadLine { line: number, message: format!("not UTF-8: {e}") })),
        };
        match form.apply(text) {
            Ok(s) => {
                out.write_all(s.as_bytes()).and_then(|()| out.write_all(b"\n")).map_err(StreamError::Write)?;
                done += 1;
            }
            Err(e) => return Ok(Err(BadLine { line: number, message: e.to_string() })),
        }
    }
}

/// The command: exit 0 when every line was transformed, 1 at a bad line, 2 on an I/O error.
pub fn run(form: Form, input: &mut dyn BufRead, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    let result = transform(form, input, out).and_then(|r| out.flush().map(|()| r).map_err(StreamError::Write));
    let name = form.command();
    match result {
        Ok(Ok(_)) => Exit::Success,
        Ok(Err(bad)) => {
            let _ = writeln!(err, "heart-fleet: {name}: stdin line {}: {}", bad.line, bad.message);
            Exit::Failure
        }
        Err(StreamError::Read(e)) => {
            let _ = writeln!(err, "heart-fleet: {name}: cannot read stdin: {e}");
            Exit::Error
        }
        Err(StreamError::Write(e)) if e.kind() == io::ErrorKind::BrokenPipe => Exit::Error,
        Err(StreamError::Write(e)) => {
            let _ = writeln!(err, "heart-fleet: {name}: cannot write stdout: {e}");
            Exit::Error
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn go(form: Form, text: &str) -> (Exit, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let exit = run(form, &mut text.as_bytes(), &mut out, &mut err);
        (exit, String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap())
    }

    #[test]
    fn canonicalizes_each_line_and_skips_blanks() {
        let (exit, out, err) = go(Form::Canonical, "{\"b\":1,\"a\":[1.0,-0]}\r\n\n   \n\"x\"");
        assert_eq!(exit, Exit::Success);
        assert_eq!(out, "{\"a\":[1,0],\"b\":1}\n\"x\"\n");
        assert!(err.is_empty());
    }

    #[test]
    fn stops_at_the_first_bad_line() {
        let (exit, out, err) = go(Form::Digest, "{}\n\n{\"n\":1e400}\n[\n");
        assert_eq!(exit, Exit::Failure);
        assert_eq!(out.lines().count(), 1);
        assert!(out.starts_with(canonical::DIGEST_PREFIX));
        assert_eq!(
            err,
            "heart-fleet: digest: stdin line 3: Canonical JSON Error: Non-finite number Infinity cannot be serialized.\n"
        );
        let (exit, _, err) = go(Form::Canonical, "{\"a\":");
        assert_eq!(exit, Exit::Failure);
        assert!(
            err.starts_with("heart-fleet: canonicalize: stdin line 1: Canonical JSON Error: invalid JSON"),
            "{err}"
        );
    }

    struct Broken(io::ErrorKind);

    impl io::Read for Broken {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            Err(io::Error::new(self.0, "the stream broke"))
        }
    }

    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::new(self.0, "the stream broke"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn stream_errors_are_one_prefixed_line() {
        let mut input = io::BufReader::new(Broken(io::ErrorKind::Other));
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert_eq!(run(Form::Digest, &mut input, &mut out, &mut err), Exit::Error);
        assert_eq!(String::from_utf8(err).unwrap(), "heart-fleet: digest: cannot read stdin: the stream broke\n");
        let mut err = Vec::new();
        let exit = run(Form::Canonical, &mut "1\n".as_bytes(), &mut Broken(io::ErrorKind::Other), &mut err);
        assert_eq!(exit, Exit::Error);
        assert_eq!(
            String::from_utf8(err).unwrap(),
            "heart-fleet: canonicalize: cannot write stdout: the stream broke\n"
        );
        let mut err = Vec::new();
        let exit = run(Form::Canonical, &mut "1\n".as_bytes(), &mut Broken(io::ErrorKind::BrokenPipe), &mut err);
        assert_eq!((exit, err.len()), (Exit::Error, 0), "a closed pipe is not reported");
    }
}
