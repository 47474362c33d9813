//! Replays every scenario in `tests/conformance/` against the core on the memory store,
//! through [`heart_fleet_core::conformance`] (the runner shared with the component host).
//! The format is documented in `tests/conformance/README.md`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

use heart_fleet_core::conformance::{self, Setup};
use heart_fleet_core::{HeartFleet, MemoryStore};

fn scenario_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance")
}

fn native(setup: Setup) -> Result<HeartFleet<MemoryStore>, String> {
    Ok(HeartFleet::new(setup.store).with_max_retries(setup.config.max_retries))
}

#[test]
fn every_conformance_scenario_replays() {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(scenario_dir())
        .expect("tests/conformance exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 40, "expected the full scenario set, found {}", paths.len());
    let mut failures = Vec::new();
    for p in &paths {
        let file = p.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(p).unwrap();
        match conformance::replay(&text, native) {
            Ok(r) if r.name != file.trim_end_matches(".json") => {
                failures.push(format!("{file}: the scenario is named {:?} (file name = scenario name)", r.name))
            }
            Ok(r) => {
                if let Some(f) = r.failure {
                    failures.push(format!("{file}: {f}"));
                }
            }
            Err(e) => failures.push(format!("{file}: {e}")),
        }
    }
    println!("replayed {} scenarios, {} failed", paths.len(), failures.len());
    assert!(failures.is_empty(), "{} scenario(s) failed:\n{}", failures.len(), failures.join("\n\n"));
}
