//! Build tasks of the heart-fleet workspace; the one CLI they run besides cargo is binaryen's
//! `wasm-opt` (from npm: `bash scripts/npm-bindgen.sh`).
//!
//! ```text
//! cargo run -p xtask -- component [--out PATH] [--keep-names] [--wasm-opt LEVEL | --no-wasm-opt]
//!                                                build the guest, wrap it, check its imports
//! cargo run -p xtask -- imports PATH             check the imports of a built component
//! ```
//!
//! `component` builds the two guests, `heart-fleet-component` (the lease layer,
//! `target/component/heart_fleet.wasm`) and `heart-fleet-receipts-component` (the receipt-log
//! verifier, `heart_fleet_receipts.wasm` beside it), each for `wasm32-unknown-unknown` with the
//! `component` profile, runs binaryen's `wasm-opt` over the core module ([`WASM_OPT_LEVEL`] by
//! default, chosen by measurement in BENCHMARKS.md; `wasm-opt` is `$WASM_OPT`, else the one
//! `scripts/npm-bindgen.sh` installs in `bindings-wasm/bindgen`, else the first on `PATH`; a
//! build without it must say so with `--no-wasm-opt`), wraps the core module into a component with the `wit-component` crate's
//! `ComponentEncoder` (the same job as `wasm-tools component new`; wit-bindgen embedded the
//! `component-type` section, so no WIT argument is needed) after dropping the module's
//! `name` section (function names; `--keep-names` keeps them for readable trap backtraces),
//! validates it with `wasmparser`,
//! writes it to `target/component/` (relative to the workspace root), prints
//! its size, its imports and its exports, and exits non-zero if the component imports
//! anything that is not `heart:fleet/*` (the CI gate: no WASI, no clock, no randomness) or, built
//! as shipped (the default level, names dropped), is larger than its ceiling.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use wit_component::{ComponentEncoder, DecodedWasm, WitPrinter};
use wit_parser::{Resolve, WorldId, WorldItem, WorldKey};

/// The `wasm-opt` level the core modules get unless told otherwise (BENCHMARKS.md, "The
/// component through wasm-opt").
const WASM_OPT_LEVEL: &str = "Oz";
/// The WebAssembly features the guests are built with (Rust's defaults for
/// `wasm32-unknown-unknown`), which `wasm-opt` must be told to accept.
const WASM_FEATURES: [&str; 6] =
    ["bulk-memory", "nontrapping-float-to-int", "sign-ext", "mutable-globals", "multivalue", "reference-types"];

/// How `component` is called.
const COMPONENT_USAGE: &str =
    "usage: cargo run -p xtask -- component [--out PATH] [--keep-names] [--wasm-opt LEVEL | --no-wasm-opt]";
/// The levels `--wasm-opt` takes (binaryen's `-O1` … `-Oz`).
const WASM_OPT_LEVELS: [&str; 6] = ["O1", "O2", "O3", "O4", "Os", "Oz"];

/// The package every import must come from.
const ALLOWED_IMPORT_PREFIX: &str = "heart:fleet/";
/// A guest crate xtask builds into a component.
struct Guest {
    /// The crate.
    package: &'static str,
    /// Its core module's file name.
    artifact: &'static str,
    /// The component's file name in `target/component/`.
    file: &'static str,
    /// The most bytes the component may have as shipped (`wasm-opt` at [`WASM_OPT_LEVEL`],
    /// names dropped): a regression guard a few per cent above its size (BENCHMARKS.md), so
    /// growth is a decision, not an accident. Other builds (`--no-wasm-opt`, another level,
    /// `--keep-names`) are for measuring and debugging, and print their size unchecked.
    ceiling: usize,
}

/// The lease component (world `heart-fleet`; BENCHMARKS.md, "The component through
/// wasm-opt": 443,102 bytes).
const LEASE: Guest = Guest {
    package: "heart-fleet-component",
    artifact: "heart_fleet_component.wasm",
    file: "heart_fleet.wasm",
    ceiling: 460_000,
};

/// The receipt-log verifier (world `receipt-verifier`; BENCHMARKS.md, "The receipt chain in
/// wasm"; 205,795 bytes through wasm-opt).
const RECEIPTS_CEILING: usize = 215_000;
const RECEIPTS: Guest = Guest {
    package: "heart-fleet-receipts-component",
    artifact: "heart_fleet_receipts_component.wasm",
    file: "heart_fleet_receipts.wasm",
    ceiling: RECEIPTS_CEILING,
};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("component") => component(&args[1..]),
        Some("imports") => match args.get(1) {
            Some(path) => std::fs::read(path)
                .map_err(|e| format!("cannot read {path}: {e}"))
                .and_then(|bytes| report(&bytes).map(|_| ())),
            None => Err("usage: cargo run -p xtask -- imports PATH".into()),
        },
        _ => Err(format!("{COMPONENT_USAGE}\n       cargo run -p xtask -- imports PATH")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn workspace_root() -> PathBuf {
    // xtask/ lives directly under the workspace root.
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Cargo's target directory (honours `CARGO_TARGET_DIR` and config), via `cargo metadata`.
fn target_dir(root: &Path) -> Result<PathBuf, String> {
    let out = cargo()
        .current_dir(root)
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!("cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("cargo metadata printed no JSON: {e}"))?;
    meta.get("target_directory")
        .and_then(serde_json::Value::as_str)
        .map(PathBuf::from)
        .ok_or_else(|| "cargo metadata has no target_directory".into())
}

fn component(args: &[String]) -> Result<(), String> {
    let root = workspace_root();
    let mut out_path = root.join("target/component").join(LEASE.file);
    let mut keep_names = false;
    let mut level: Option<Option<String>> = None; // None: not given; Some(None): --no-wasm-opt
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let chosen = match arg.as_str() {
            "--out" => {
                out_path = rest.next().map(PathBuf::from).ok_or("--out needs a path")?;
                continue;
            }
            "--keep-names" => {
                keep_names = true;
                continue;
            }
            "--wasm-opt" => {
                let given = rest.next().ok_or("--wasm-opt needs a level: O1, O2, O3, O4, Os or Oz")?;
                if !WASM_OPT_LEVELS.contains(&given.as_str()) {
                    return Err(format!("--wasm-opt {given}: the level is one of O1, O2, O3, O4, Os, Oz"));
                }
                Some(given.clone())
            }
            "--no-wasm-opt" => None,
            _ => return Err(COMPONENT_USAGE.into()),
        };
        if level.replace(chosen).is_some() {
            return Err(format!("give --wasm-opt or --no-wasm-opt once\n{COMPONENT_USAGE}"));
        }
    }
    let level = level.unwrap_or_else(|| Some(WASM_OPT_LEVEL.to_owned()));
    let shipped = !keep_names && level.as_deref() == Some(WASM_OPT_LEVEL);
    let opt = match level {
        Some(level) => Some((wasm_opt_binary(&root)?, level)),
        None => None,
    };
    // The verifier goes next to the lease component. Both are built before a size is judged.
    let receipts_path = out_path.with_file_name(RECEIPTS.file);
    let lease = build(&root, &LEASE, &out_path, keep_names, opt.as_ref())?;
    let receipts = build(&root, &RECEIPTS, &receipts_path, keep_names, opt.as_ref())?;
    for (guest, path, size) in [(&LEASE, &out_path, lease), (&RECEIPTS, &receipts_path, receipts)] {
        if !shipped {
            println!("{}: {size} bytes; not built as shipped, so its ceiling is not checked", path.display());
        } else if size > guest.ceiling {
            return Err(format!(
                "{} is {size} bytes, over its ceiling of {} (xtask/src/main.rs)",
                path.display(),
                guest.ceiling
            ));
        }
    }
    Ok(())
}

/// binaryen's `wasm-opt`: `$WASM_OPT` (when not empty), else the one
/// `scripts/npm-bindgen.sh` installs in `bindings-wasm/bindgen`, else the first on `PATH`.
fn wasm_opt_binary(root: &Path) -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("WASM_OPT").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let npm = root.join("bindings-wasm/bindgen/node_modules/.bin/wasm-opt");
    if npm.is_file() {
        return Ok(npm);
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("wasm-opt"))
        .find(|p| p.is_file());
    on_path.ok_or_else(|| {
        "wasm-opt not found: run `bash scripts/npm-bindgen.sh` (binaryen from npm), set WASM_OPT, \
         or build without it with --no-wasm-opt"
            .into()
    })
}

/// `module` through `wasm-opt -<level>`; custom sections (wit-bindgen's `component-type`)
/// are kept, and the `name` section only with `keep_names`.
fn optimize(
    module: &[u8],
    (binary, level): &(PathBuf, String),
    work: &Path,
    keep_names: bool,
) -> Result<Vec<u8>, String> {
    std::fs::create_dir_all(work).map_err(|e| format!("cannot create {}: {e}", work.display()))?;
    // Named by process, so two builds sharing a target directory do not meet.
    let pid = std::process::id();
    let (input, output) = (work.join(format!("input-{pid}.wasm")), work.join(format!("output-{pid}.wasm")));
    std::fs::write(&input, module).map_err(|e| format!("cannot write {}: {e}", input.display()))?;
    let mut cmd = Command::new(binary);
    cmd.arg(format!("-{level}")).args(WASM_FEATURES.map(|f| format!("--enable-{f}")));
    if keep_names {
        cmd.arg("--debuginfo");
    }
    let status =
        cmd.arg(&input).arg("-o").arg(&output).status().map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
    if !status.success() {
        return Err(format!("{} -{level} failed ({status})", binary.display()));
    }
    let optimized = std::fs::read(&output).map_err(|e| format!("cannot read {}: {e}", output.display()));
    // Scratch files: a failure to remove them changes nothing built.
    let _ = std::fs::remove_file(&input);
    let _ = std::fs::remove_file(&output);
    optimized
}

/// Builds one guest, wraps it, validates it, writes it to `out_path`, and checks its imports;
/// its size in bytes.
fn build(
    root: &Path,
    guest: &Guest,
    out_path: &Path,
    keep_names: bool,
    opt: Option<&(PathBuf, String)>,
) -> Result<usize, String> {
    let started = std::time::Instant::now();
    let status = cargo()
        .current_dir(root)
        .args(["build", "-p", guest.package, "--target", "wasm32-unknown-unknown", "--profile", "component"])
        .status()
        .map_err(|e| format!("cannot run cargo build: {e}"))?;
    if !status.success() {
        return Err(format!("building {} for wasm32-unknown-unknown failed ({status})", guest.package));
    }
    let target = target_dir(root)?;
    let module_path = target.join("wasm32-unknown-unknown/component").join(guest.artifact);
    let module = std::fs::read(&module_path).map_err(|e| format!("cannot read {}: {e}", module_path.display()))?;
    let module = if keep_names { module } else { strip_names(&module)? };
    let built = module.len();
    let module = match opt {
        Some(opt) => optimize(&module, opt, &target.join("wasm-opt").join(guest.package), keep_names)?,
        None => module,
    };
    let bytes = ComponentEncoder::default()
        .validate(true)
        .module(&module)
        .and_then(|mut encoder| encoder.encode())
        .map_err(|e| format!("cannot wrap {} into a component: {e:#}", module_path.display()))?;
    wasmparser::Validator::new()
        .validate_all(&bytes)
        .map_err(|e| format!("the encoded component does not validate: {e}"))?;
    if let Some(dir) = out_path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    std::fs::write(out_path, &bytes).map_err(|e| format!("cannot write {}: {e}", out_path.display()))?;
    let how = opt.map_or_else(
        || " without wasm-opt".to_owned(),
        |(_, level)| format!(", {} bytes after wasm-opt -{level}", module.len()),
    );
    println!("core module: {} ({built} bytes{how})", module_path.display());
    println!(
        "component:   {} ({} bytes, {:.1} KiB) in {:.1} s",
        out_path.display(),
        bytes.len(),
        bytes.len() as f64 / 1024.0,
        started.elapsed().as_secs_f64()
    );
    report(&bytes)?;
    Ok(bytes.len())
}

/// The module without its `name` custom section (function names for backtraces), like
/// `wasm-tools strip` limited to that one section: every other section (the `component-type`
/// section wit-bindgen embedded, `target_features`, `producers`) is copied byte for byte.
fn strip_names(module: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(module.len());
    out.extend_from_slice(module.get(..8).ok_or("the guest module is truncated")?);
    for payload in wasmparser::Parser::new(0).parse_all(module) {
        let payload = payload.map_err(|e| format!("cannot parse the guest module: {e}"))?;
        if let wasmparser::Payload::CustomSection(c) = &payload
            && c.name() == "name"
        {
            continue;
        }
        if let Some((id, range)) = payload.as_section() {
            let body = module.get(range).ok_or("section out of range")?;
            out.push(id);
            leb128_u32(&mut out, u32::try_from(body.len()).map_err(|_| "section too large")?);
            out.extend_from_slice(body);
        }
    }
    Ok(out)
}

fn leb128_u32(out: &mut Vec<u8>, mut n: u32) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Prints the component's imports and exports and checks the imports against the allowlist.
fn report(bytes: &[u8]) -> Result<(), String> {
    if !wasmparser::Parser::is_component(bytes) {
        return Err("not a component (a core module? wrap it with `cargo run -p xtask -- component`)".into());
    }
    let (resolve, world) =
        match wit_component::decode(bytes).map_err(|e| format!("cannot decode the component: {e:#}"))? {
            DecodedWasm::Component(resolve, world) => (resolve, world),
            DecodedWasm::WitPackage(..) => return Err("this is a WIT package, not a component".into()),
        };
    let imports = names(&resolve, world, true);
    let exports = names(&resolve, world, false);
    println!("imports ({}):", imports.len());
    for name in &imports {
        println!("  import {name}");
    }
    println!("exports ({}):", exports.len());
    for name in &exports {
        println!("  export {name}");
    }
    if std::env::var_os("XTASK_PRINT_WIT").is_some() {
        let mut printer = WitPrinter::default();
        let ids: Vec<_> = resolve.packages.iter().map(|(id, _)| id).collect();
        for id in ids {
            if printer.print(&resolve, id, &[]).is_ok() {
                println!("{}", printer.output);
            }
        }
    }
    let foreign: Vec<&String> = imports.iter().filter(|n| !n.starts_with(ALLOWED_IMPORT_PREFIX)).collect();
    if foreign.is_empty() {
        println!("import gate: ok (every import is {ALLOWED_IMPORT_PREFIX}*)");
        Ok(())
    } else {
        Err(format!(
            "import gate: the component imports {} item(s) outside {ALLOWED_IMPORT_PREFIX}*: {}",
            foreign.len(),
            foreign.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
        ))
    }
}

fn names(resolve: &Resolve, world: WorldId, imports: bool) -> Vec<String> {
    let w = &resolve.worlds[world];
    let items = if imports { &w.imports } else { &w.exports };
    items
        .iter()
        .map(|(key, item)| match (key, item) {
            (WorldKey::Interface(id), _) => {
                resolve.id_of(*id).unwrap_or_else(|| format!("<anonymous interface {id:?}>"))
            }
            (WorldKey::Name(name), WorldItem::Function(_)) => format!("function {name}"),
            (WorldKey::Name(name), WorldItem::Type { .. }) => format!("type {name}"),
            (WorldKey::Name(name), WorldItem::Interface { .. }) => format!("interface {name}"),
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use wit_component::StringEncoding;
    use wit_parser::{LiftLowerAbi, ManglingAndAbi};

    /// A component of `world w` in `wit`, with a dummy core module.
    fn component_of(wit: &str) -> Vec<u8> {
        let mut resolve = Resolve::default();
        let pkg = resolve.push_str("test.wit", wit).unwrap();
        let world = resolve.select_world(&[pkg], Some("w")).unwrap();
        let mut module = wit_component::dummy_module(&resolve, world, ManglingAndAbi::Legacy(LiftLowerAbi::Sync));
        wit_component::embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8).unwrap();
        ComponentEncoder::default().module(&module).unwrap().encode().unwrap()
    }

    #[test]
    fn the_gate_passes_heart_fleet_imports_and_fails_any_other() {
        let ok = component_of(
            "package heart:fleet@0.1.0;\n\
             interface lease-store { execute: func(request: string) -> result<string, string>; }\n\
             world w { import lease-store; export run: func(); }",
        );
        assert!(report(&ok).is_ok());
        let bad = component_of(
            "package heart:fleet@0.1.0;\n\
             package wasi:clocks@0.2.0 { interface wall-clock { now: func() -> u64; } }\n\
             world w { import wasi:clocks/wall-clock@0.2.0; export run: func(); }",
        );
        let e = report(&bad).unwrap_err();
        assert!(e.contains("wasi:clocks/wall-clock@0.2.0"), "{e}");
        assert!(report(b"\0asm\x01\0\0\0").unwrap_err().contains("not a component"));
    }
}
