//! The parts of the settings' JSON Schema that their serde form does not show: a duration is a
//! humantime string, and `publicUrl` must be an http(s) URL. The fields name these in their
//! `#[schemars(...)]` attributes; the chart's values schema checks `gateway.settings` with the
//! result, so a value the operator would refuse at start is refused by Helm instead.
//!
//! The patterns are what Go's `regexp` (Helm) and ECMA-262 read alike. They may accept a value
//! the loader still refuses (an overflowing number, a zero `sessionTtl`): the loader has the last
//! word. They never refuse a value the loader accepts (the tests below hold them to that).

use schemars::{Schema, SchemaGenerator, json_schema};

/// humantime's grammar: one or more numbers (a fraction allowed, blanks anywhere between
/// digits), each followed by one of its unit names, e.g. `90s`, `1h 30m`, `1.5h`, `2days`; or
/// exactly `0`, which humantime reads as zero (found by the property below).
pub const DURATION: &str = concat!(
    r"^0$|^\s*([0-9][0-9\s]*(\.[0-9\s]*[0-9][0-9\s]*)?",
    "(nanos|nsec|ns|usec|us|µs|millis|msec|ms|seconds|second|secs|sec|s|",
    "minutes|minute|mins|min|m|hours|hour|hrs|hr|h|days|day|d|weeks|week|wks|wk|w|",
    "months|month|M|years|year|yrs|yr|y)",
    r"\s*)+$"
);

/// An http or https URL (`validate` also wants a host; the URL parser decides that).
pub(crate) const HTTP_URL: &str = r"^\s*[Hh][Tt][Tt][Pp][Ss]?:";

/// A duration field (`with = "humantime_serde"`): a string in humantime's grammar.
pub fn duration(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "pattern": DURATION,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pattern(p: &str) -> regex::Regex {
        regex::Regex::new(p).expect("the pattern compiles")
    }

    /// What the loader reads: humantime's parser; an overflow is a value, not a grammar error.
    fn humantime_reads(s: &str) -> bool {
        !matches!(
            humantime::parse_duration(s),
            Err(e) if !matches!(e, humantime::DurationError::NumberOverflow)
        )
    }

    #[test]
    fn every_humantime_unit_and_nothing_else() {
        let re = pattern(DURATION);
        for unit in [
            "nanos", "nsec", "ns", "usec", "us", "µs", "millis", "msec", "ms", "seconds", "second",
            "secs", "sec", "s", "minutes", "minute", "mins", "min", "m", "hours", "hour", "hrs",
            "hr", "h", "days", "day", "d", "weeks", "week", "wks", "wk", "w", "months", "month",
            "M", "years", "year", "yrs", "yr", "y",
        ] {
            let text = format!("2{unit}");
            assert!(humantime_reads(&text), "{text}");
            assert!(re.is_match(&text), "{text}");
        }
        for text in [
            "90s",
            "1h 30m",
            "1h30m",
            "1.5h",
            " 12 h ",
            "2days 3hours",
            "10ms",
            "0s",
        ] {
            assert!(humantime_reads(text) && re.is_match(text), "{text}");
        }
        for text in [
            "",
            "soon",
            "12",
            "1 2",
            "h",
            "1.h",
            "1x",
            "1H",
            "1sek",
            "1 hour and 5 minutes",
            "-1s",
            "1,5h",
            "1.5.5h",
        ] {
            assert!(!humantime_reads(text), "humantime reads {text:?}");
            assert!(!re.is_match(text), "the pattern takes {text:?}");
        }
    }

    proptest! {
        /// Strings made of what durations are made of (numbers, blanks, dots, unit names and
        /// near misses): the pattern and humantime agree on every one.
        #[test]
        fn the_duration_pattern_is_humantimes_grammar(
            text in "([0-9]{1,3}| |[.]|ms|mins?|hours?|[hmsMdwyHx]|yrs?|µs|ns|sek){1,6}"
        ) {
            prop_assert_eq!(pattern(DURATION).is_match(&text), humantime_reads(&text), "{:?}", text);
        }
    }

    #[test]
    fn the_url_pattern_never_refuses_a_url_the_loader_accepts() {
        let re = pattern(HTTP_URL);
        let loader_accepts = |url: &str| {
            let mut snapshot = crate::Snapshot::default();
            snapshot.gateway.public_url = Some(url.to_string());
            crate::validate(&snapshot).is_ok()
        };
        for url in [
            "https://mcp.example.com",
            "http://10.0.0.1:8080/base",
            "HTTPS://MCP.example.com",
            " https://mcp.example.com",
            "http:mcp.example.com",
            "https:\\\\mcp.example.com",
        ] {
            assert!(loader_accepts(url), "{url}");
            assert!(re.is_match(url), "{url}");
        }
        for url in [
            "mcp.example.com",
            "mcp.example.com:8443",
            "ftp://mcp.example.com",
            "//mcp.example.com",
        ] {
            assert!(!loader_accepts(url), "{url}");
            assert!(!re.is_match(url), "{url}");
        }
    }
}
