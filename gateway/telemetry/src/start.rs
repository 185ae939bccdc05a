//! What every Switchboard binary does alike at start, besides its log: it binds its listeners,
//! naming the flag and the address of one that cannot be bound ([`bind`]), and a start that
//! fails ends with one line on stderr ([`exit_code`]).
//!
//! A listener that cannot be bound is a configuration error (a port another process holds, an
//! address not of this host): the person who started the process needs the flag to change and
//! the address it named, not the OS error alone or a backtrace.

use std::fmt::Display;
use std::process::ExitCode;

/// A listener that could not be bound: the flag that named it, the address, and why.
#[derive(Debug, thiserror::Error)]
#[error("{flag} {address}: {}", reason(.error))]
pub struct BindError {
    /// The command-line flag the address came from (e.g. `--metrics-listen`).
    pub flag: &'static str,
    pub address: String,
    /// What the OS said (its words are in the message, so it is not a `source` as well).
    pub error: std::io::Error,
}

/// Binds a TCP listener on `address`, the value of `flag`.
pub async fn bind(flag: &'static str, address: &str) -> Result<tokio::net::TcpListener, BindError> {
    tokio::net::TcpListener::bind(address)
        .await
        .map_err(|error| BindError {
            flag,
            address: address.to_string(),
            error,
        })
}

/// The OS's refusal in words that say what to do about it.
fn reason(error: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    match error.kind() {
        K::AddrInUse => "address already in use (another process listens on it)".into(),
        K::AddrNotAvailable => "address not available (not an address of this host)".into(),
        K::PermissionDenied => {
            "permission denied (a port below 1024 needs privileges the process does not have)"
                .into()
        }
        _ => error.to_string(),
    }
}

/// How a process whose start (or run) failed ends: `Error: ` and the error with its causes
/// (`{:#}`) on one line of stderr, exit status 1. Never a backtrace: returning the error from
/// `main` would print its `Debug` form, which carries one when `RUST_BACKTRACE` is set.
pub fn exit_code<E: Display>(result: Result<(), E>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("Error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_port_in_use_is_named_with_its_flag_and_address() {
        let held = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = held.local_addr().unwrap().to_string();
        let error = bind("--metrics-listen", &address).await.unwrap_err();
        assert_eq!(error.error.kind(), std::io::ErrorKind::AddrInUse);
        assert_eq!(
            error.to_string(),
            format!(
                "--metrics-listen {address}: address already in use (another process listens on it)"
            )
        );
        // Once the port is free, the same call binds it.
        drop(held);
        assert!(bind("--metrics-listen", &address).await.is_ok());
    }

    #[tokio::test]
    async fn an_address_that_does_not_parse_is_named_too() {
        let error = bind("--listen", "no-port-here").await.unwrap_err();
        let message = error.to_string();
        assert!(message.starts_with("--listen no-port-here: "), "{message}");
    }
}
