//! `instances register|heartbeat|drain|list`.

use std::io::Write;

use heart_fleet_core::{ErrorCode, HeartError};
use serde_json::json;

use super::session::{Session, finish_lines, json_line};
use crate::Exit;
use crate::cli::{Global, InstancesArgs, InstancesCommand, ReceiptsArg};
use crate::identity::hostname;

/// `instances …`.
pub fn instances(global: &Global, args: &InstancesArgs, out: &mut dyn Write, err: &mut dyn Write) -> Exit {
    let mut s = match Session::open(global, &ReceiptsArg::default(), Some(5), err) {
        Ok(s) => s,
        Err(exit) => return exit,
    };
    let refused = |what: &str, id: &str| {
        HeartError::new(
            ErrorCode::InvalidState,
            format!("{what}: instance {id} is unknown or dead (register it again)"),
        )
    };
    let lines: Result<Vec<String>, HeartError> = match &args.command {
        InstancesCommand::List { json } => s.fleet.list_instances().map(|rows| {
            rows.iter()
                .map(|i| {
                    if *json {
                        json_line(i)
                    } else {
                        format!(
                            "{}  {:<8}  host={}  pid={}  last_heartbeat={}",
                            i.instance_id,
                            i.status.as_str(),
                            i.hostname.as_deref().unwrap_or("-"),
                            i.pid.map_or_else(|| "-".to_owned(), |p| p.to_string()),
                            i.last_heartbeat.to_iso()
                        )
                    }
                })
                .collect()
        }),
        InstancesCommand::Register { id, hostname: host, pid } => {
            let host = host.clone().unwrap_or_else(hostname);
            s.fleet.register_instance(id, Some(&host), *pid).map(|i| vec![json_line(&i)])
        }
        InstancesCommand::Heartbeat { id } => match s.fleet.heartbeat_instance(id) {
            Ok(true) => Ok(vec![json_line(&json!({"instanceId": id, "heartbeat": true}))]),
            Ok(false) => Err(refused("heartbeat", id)),
            Err(e) => Err(e),
        },
        InstancesCommand::Drain { id } => match s.fleet.drain_instance(id) {
            Ok(true) => Ok(vec![json_line(&json!({"instanceId": id, "drained": true}))]),
            Ok(false) => Err(refused("drain", id)),
            Err(e) => Err(e),
        },
    };
    finish_lines(&s, lines, out, err)
}
