//! Argument rules as written (`keys[].arguments`): the CEL expression a call's arguments must
//! satisfy, and the values some arguments take from the caller. Parsed here, so a rule that
//! does not compile or a binding that names no part of the caller is refused when the
//! configuration is loaded, naming the field; `switchboard-core` evaluates them.

/// The caller's fields a binding may name.
pub const CALLER_FIELDS: &[&str] = &["subject", "namespace", "key", "kind"];

/// Why a rule or a binding as written cannot be used (the words for the field's error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ArgumentError(pub String);

/// One piece of a binding's text: literal text, or a part of the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    /// `${caller.<field>}` ([`CALLER_FIELDS`]).
    Caller(&'static str),
    /// `${caller.claims.<claim>}`: a claim of a signed-in person's token.
    Claim(String),
}

/// A binding's text in pieces: `acme-${caller.subject}` is `Text("acme-")`, `Caller("subject")`.
pub fn binding(template: &str) -> Result<Vec<Piece>, ArgumentError> {
    let mut pieces = Vec::new();
    let mut rest = template;
    while let Some(at) = rest.find("${") {
        if at > 0 {
            pieces.push(Piece::Text(rest[..at].to_string()));
        }
        let after = &rest[at + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| ArgumentError(format!("{template:?}: a `${{` without its `}}`")))?;
        let name = after[..end].trim();
        let field = name.strip_prefix("caller.").ok_or_else(|| {
            ArgumentError(format!(
                "{template:?}: `${{{name}}}` is not a part of the caller (`${{caller.subject}}`, ...)"
            ))
        })?;
        if let Some(claim) = field.strip_prefix("claims.") {
            if claim.is_empty()
                || !claim
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-:.".contains(c))
            {
                return Err(ArgumentError(format!(
                    "{template:?}: `{claim}` is not a claim name"
                )));
            }
            pieces.push(Piece::Claim(claim.to_string()));
        } else {
            let known = CALLER_FIELDS.iter().find(|f| **f == field).ok_or_else(|| {
                ArgumentError(format!(
                    "{template:?}: the caller has no `{field}` (it has {}, and claims.<claim>)",
                    CALLER_FIELDS.join(", ")
                ))
            })?;
            pieces.push(Piece::Caller(known));
        }
        rest = &after[end + 1..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest.to_string()));
    }
    if pieces.iter().all(|p| matches!(p, Piece::Text(_))) {
        return Err(ArgumentError(format!(
            "{template:?} names no part of the caller: a fixed value is a default, not a binding"
        )));
    }
    Ok(pieces)
}

/// Whether a CEL rule compiles, and if not why (the parser's words).
pub fn rule(source: &str) -> Result<(), ArgumentError> {
    cel::Program::compile(source).map(|_| ()).map_err(|e| {
        ArgumentError(
            e.to_string()
                .lines()
                .next()
                .unwrap_or("does not parse")
                .to_string(),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bindings_name_the_caller_and_nothing_else() {
        assert_eq!(
            binding("acme-${caller.subject}"),
            Ok(vec![Piece::Text("acme-".into()), Piece::Caller("subject")])
        );
        assert_eq!(
            binding("${caller.claims.email}"),
            Ok(vec![Piece::Claim("email".into())])
        );
        for bad in [
            "plain",
            "${caller.password}",
            "${env.HOME}",
            "${caller.subject",
            "${caller.claims.}",
        ] {
            assert!(binding(bad).is_err(), "{bad}");
        }
        assert!(rule("args.repo.startsWith(\"acme/\")").is_ok());
        assert!(rule("args.repo.startsWith(").is_err());
    }
}
