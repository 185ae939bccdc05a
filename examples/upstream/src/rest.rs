//! A tiny REST API beside the MCP server, for OpenAPI-backed servers in the gateway (issue 24):
//! `GET /rest/add?a=&b=` answers `{"sum": a + b}`, `POST /rest/echo` answers the JSON object it
//! was sent, and `GET /rest/openapi.json` is their OpenAPI 3.1 document (the base URL is
//! `/rest`, so the document's paths are `/add` and `/echo`). Nothing here is counted in
//! `/_stats` or recorded in `/_requests`: it is the cheapest REST call the upstream can answer,
//! the direct call a benchmark compares the gateway's OpenAPI path with.

use axum::body::Bytes;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::percent;

/// The OpenAPI 3.1 document of the REST API (what `GET /rest/openapi.json` serves).
pub const DOCUMENT: &str = r##"{
  "openapi": "3.1.0",
  "info": {
    "title": "switchboard example upstream REST API",
    "version": "1.0.0",
    "description": "Two operations for OpenAPI-backed servers: an integer sum and a JSON echo."
  },
  "servers": [{"url": "/rest"}],
  "paths": {
    "/add": {
      "get": {
        "operationId": "add",
        "summary": "Adds two integers",
        "parameters": [
          {"name": "a", "in": "query", "required": true, "schema": {"type": "integer"}},
          {"name": "b", "in": "query", "required": true, "schema": {"type": "integer"}}
        ],
        "responses": {
          "200": {
            "description": "The sum",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Sum"}}}
          },
          "400": {
            "description": "a or b missing, not an integer, or the sum out of range",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
          }
        }
      }
    },
    "/echo": {
      "post": {
        "operationId": "echo",
        "summary": "Answers the JSON object it was sent",
        "requestBody": {
          "required": true,
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Echo"}}}
        },
        "responses": {
          "200": {
            "description": "The object as it was sent",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Echo"}}}
          },
          "400": {
            "description": "The body is not a JSON object",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
          }
        }
      }
    }
  },
  "components": {
    "schemas": {
      "Sum": {
        "type": "object",
        "properties": {"sum": {"type": "integer"}},
        "required": ["sum"]
      },
      "Echo": {
        "type": "object",
        "properties": {"text": {"type": "string"}, "tag": {"type": "string"}},
        "required": ["text"]
      },
      "Error": {
        "type": "object",
        "properties": {"error": {"type": "string"}},
        "required": ["error"]
      }
    }
  }
}
"##;

/// `GET /rest/openapi.json`.
pub async fn document() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT).into_response()
}

/// `GET /rest/add?a=&b=`.
pub async fn add_endpoint(uri: Uri) -> Response {
    answer(add(uri.query().unwrap_or_default()))
}

/// `POST /rest/echo`.
pub async fn echo_endpoint(body: Bytes) -> Response {
    answer(echo(&body))
}

/// `{"sum": a + b}` for a query string with integers `a` and `b` (form-encoded; a repeated
/// name takes its last value).
pub fn add(query: &str) -> Result<Value, String> {
    let pairs = percent::form(query.as_bytes()).ok_or("the query string is malformed")?;
    let arg = |name: &str| -> Result<i64, String> {
        let value = pairs
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .ok_or_else(|| format!("query parameter {name} is missing"))?;
        value
            .parse()
            .map_err(|_| format!("query parameter {name} is not an integer: {value:?}"))
    };
    let sum = arg("a")?
        .checked_add(arg("b")?)
        .ok_or("the sum is out of range")?;
    Ok(json!({ "sum": sum }))
}

/// The JSON object the body holds, as it came (any other body is refused).
pub fn echo(body: &[u8]) -> Result<Value, String> {
    match serde_json::from_slice::<Value>(body) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err("the body is not a JSON object".into()),
        Err(e) => Err(format!("the body is not JSON: {e}")),
    }
}

fn answer(result: Result<Value, String>) -> Response {
    let (status, body) = match result {
        Ok(value) => (StatusCode::OK, value),
        Err(error) => (StatusCode::BAD_REQUEST, json!({ "error": error })),
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adds_query_integers() {
        assert_eq!(add("a=1&b=2"), Ok(json!({"sum": 3})));
        assert_eq!(add("b=-5&a=%2B2"), Ok(json!({"sum": -3})));
        assert_eq!(
            add("a=1&b=2&a=10"),
            Ok(json!({"sum": 12})),
            "last value wins"
        );
        assert_eq!(add("a=1"), Err("query parameter b is missing".to_string()));
        assert_eq!(
            add("a=1.5&b=2"),
            Err("query parameter a is not an integer: \"1.5\"".to_string())
        );
        assert_eq!(
            add(&format!("a={}&b=1", i64::MAX)),
            Err("the sum is out of range".to_string())
        );
        assert!(add("a=%zz&b=1").is_err());
        assert!(add("").is_err());
    }

    #[test]
    fn echoes_objects_only() {
        let sent = br#"{"text":"hi","tag":"t","extra":[1,{"x":null}]}"#;
        assert_eq!(
            echo(sent),
            Ok(json!({"text": "hi", "tag": "t", "extra": [1, {"x": null}]}))
        );
        assert_eq!(echo(b"[1]"), Err("the body is not a JSON object".into()));
        assert!(
            echo(b"not json")
                .unwrap_err()
                .starts_with("the body is not JSON")
        );
    }

    #[test]
    fn the_document_describes_the_routes() {
        let doc: Value = serde_json::from_str(DOCUMENT).expect("the document is JSON");
        assert_eq!(doc["openapi"], "3.1.0");
        assert_eq!(doc["servers"][0]["url"], "/rest");
        let add = &doc["paths"]["/add"]["get"];
        assert_eq!(add["operationId"], "add");
        let params: Vec<_> = add["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["name"].as_str().unwrap(), p["in"].as_str().unwrap()))
            .collect();
        assert_eq!(params, [("a", "query"), ("b", "query")]);
        assert_eq!(doc["paths"]["/echo"]["post"]["operationId"], "echo");
        // Every reference resolves.
        for name in ["Sum", "Echo", "Error"] {
            assert!(doc["components"]["schemas"][name].is_object(), "{name}");
        }
        let text = DOCUMENT.to_string();
        for r in text.split("\"$ref\": \"#/components/schemas/").skip(1) {
            let name = r.split('"').next().unwrap();
            assert!(doc["components"]["schemas"][name].is_object(), "{name}");
        }
    }
}
