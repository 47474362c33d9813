//! `runs create|show|list|requeue|force-release`.

use std::io::Write;

use heart_fleet_core::request::{NewRun, StoreReply, StoreRequest};
use heart_fleet_core::{ErrorCode, HeartError, LeaseStore, RunStatus};
use serde_json::json;

use super::session::{Session, fail, finish_lines, json_line};
use crate::Exit;
use crate::cli::{Global, ReceiptsArg, RunsArgs, RunsCommand};

fn run_line(r: &heart_fleet_core::RunRow) -> String {
    format!(
        "{}  {:<11}  owner={}  expires={}  retries={}  epoch={}  key={}",
        r.id,
        r.status.as_str(),
        r.lease_owner.as_deref().unwrap_or("-"),
        r.lease_expires_at.map_or_else(|| "-".to_owned(), |t| t.to_iso()),
        r.retries,
        r.fencing_epoch,
        r.idempotency_key
    )
}

/// `runs …`.
pub fn runs(global: &Global, args: &RunsArgs, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    let none = ReceiptsArg::default();
    let receipts = match &args.command {
        RunsCommand::Requeue { receipts, .. } | RunsCommand::ForceRelease { receipts, .. } => receipts,
        _ => &none,
    };
    let mut s = match Session::open(global, receipts, Some(5), err) {
        Ok(s) => s,
        Err(exit) => return exit,
    };
    let lines: Result<Vec<String>, HeartError> = match &args.command {
        RunsCommand::List { status, limit, json } => {
            let status = match status.as_deref().map(RunStatus::parse).transpose() {
                Ok(st) => st,
                Err(e) => return fail(err, Exit::Error, format!("--status: {}", e.message)),
            };
            s.fleet
                .list_runs(status, *limit)
                .map(|rows| rows.iter().map(|r| if *json { json_line(r) } else { run_line(r) }).collect::<Vec<_>>())
        }
        RunsCommand::Show { id } => match s.fleet.get_run(id) {
            Ok(Some(r)) => Ok(vec![json_line(&r)]),
            Ok(None) => Err(HeartError::new(ErrorCode::RunNotFound, format!("run {id} not found"))),
            Err(e) => Err(e),
        },
        RunsCommand::Requeue { id, operator, .. } => s.fleet.requeue_run(id, operator).map(|r| vec![json_line(&r)]),
        RunsCommand::ForceRelease { id, .. } => s.fleet.force_release(id).map(|r| vec![json_line(&r)]),
        RunsCommand::Create { key, objective, created_by } => {
            let req = StoreRequest::EnsureRun(NewRun {
                idempotency_key: key.clone(),
                objective: objective.clone(),
                created_by: created_by.clone(),
            });
            let store = s.fleet.store_mut();
            // A request run by hand is settled by hand (`LeaseStore::settle`: the store holds
            // writes for its receipts table).
            match store.execute(req).and_then(|a| store.settle().map(|()| a)) {
                Ok(a) => match a.reply {
                    StoreReply::Ensured { run, created } => {
                        Ok(vec![json_line(&json!({"created": created, "run": run}))])
                    }
                    _ => Err(HeartError::new(
                        ErrorCode::StoreProtocol,
                        "runs create: the store answered something other than the run",
                    )),
                },
                Err(e) => Err(HeartError::store("runs create", &e)),
            }
        }
    };
    finish_lines(&s, lines, out, err)
}
