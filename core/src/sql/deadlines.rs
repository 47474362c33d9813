//! How long a PostgreSQL store waits, the same in every driver (the Rust `PgStore`, Node's
//! `PgLeaseStore`, Python's `PsycopgLeaseStore`): a statement's client-side deadline, the
//! server's own `statement_timeout` just inside it, the connect deadline and the grace a
//! cancel request gets. The hosts take these values from here
//! ([`crate::bridge::postgres_deadlines_json`]) and keep no copy.

/// How long one statement may take, client-side, when the caller sets nothing.
pub const DEFAULT_STATEMENT_TIMEOUT_MS: u64 = 10_000;

/// The longest statement deadline a store takes (a day): more is a mistake in the unit.
pub const MAX_STATEMENT_TIMEOUT_MS: u64 = 86_400_000;

/// How long connecting may take when neither the URL nor the caller says. Whole seconds of at
/// least 2: libpq (psycopg) takes `connect_timeout` in seconds, as at least 2, and 0 as never.
pub const CONNECT_TIMEOUT_MS: u64 = 5_000;
const _: () = assert!(
    CONNECT_TIMEOUT_MS.is_multiple_of(1000) && CONNECT_TIMEOUT_MS >= 2000,
    "libpq takes whole seconds, at least 2"
);

/// Past a statement's deadline, how long the client waits for the server to take its cancel
/// request before it gives up on the connection.
pub const CANCEL_GRACE_MS: u64 = 1_000;

/// The server-side `statement_timeout` for a client-side deadline of `client_ms`: a fifth
/// shorter, by at most 100 ms and to no less than 1, so that the server abandons a statement
/// (a lock wait) with its own error before the client stops waiting for it.
pub fn server_statement_timeout_ms(client_ms: u64) -> u64 {
    client_ms.saturating_sub((client_ms / 5).min(100)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_gives_up_first_by_a_fifth_at_most_100_ms() {
        assert_eq!(server_statement_timeout_ms(DEFAULT_STATEMENT_TIMEOUT_MS), 9_900);
        assert_eq!(server_statement_timeout_ms(300), 240);
        assert_eq!(server_statement_timeout_ms(4), 4);
        assert_eq!(server_statement_timeout_ms(1), 1);
        assert_eq!(server_statement_timeout_ms(0), 1);
    }

    #[test]
    fn the_hosts_read_the_deadlines_as_json() {
        let json: serde_json::Value = serde_json::from_str(&crate::bridge::postgres_deadlines_json()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "statementTimeoutMs": 10_000,
                "maxStatementTimeoutMs": 86_400_000,
                "connectTimeoutMs": 5_000,
                "cancelGraceMs": 1_000,
            })
        );
    }
}
