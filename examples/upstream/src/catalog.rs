//! What the server offers: tools (base or generated), the `greet` prompt and the example
//! resources, and what calling each one returns.

use std::time::Duration;

use axum::http::HeaderMap;
use serde_json::{Value, json};

use crate::protocol::{self, INVALID_PARAMS, MISSING_CAPABILITY, RESOURCE_NOT_FOUND, RpcError};
use crate::variants::{CursorMode, Variant};

const BASE_TOOLS: [&str; 6] = ["add", "echo", "request_headers", "slow", "fail", "confirm"];
const README: &str =
    "# example-upstream\n\nA small MCP server used by Switchboard's tests and benchmarks.\n";
/// `requestState` handed out by `confirm`; echoed back by the client on its retry.
const CONFIRM_STATE: &str = "confirm-v1:3q2-7w==";

/// Number of tools in the listing (before any `cursor=endless` extension).
pub fn tool_count(v: &Variant) -> usize {
    v.tools.unwrap_or(BASE_TOOLS.len() + usize::from(v.account))
}

/// The tool definition at position `i` of the (virtual) listing.
pub fn tool_at(v: &Variant, i: usize) -> Value {
    match (v.tools, BASE_TOOLS.get(i)) {
        (None, None) if v.account && i == BASE_TOOLS.len() => json!({
            "name": "whoami",
            "description": "Which Example Accounts account this call acts as.",
            "inputSchema": { "type": "object", "properties": {} },
        }),
        (None, Some(&"add")) if v.verbose_schemas => verbose_add(&v.name),
        (None, Some(name)) => base_tool(name, &v.name),
        _ => json!({
            "name": format!("tool_{i}"),
            "description": format!("Generated tool number {i} (server {}).", v.name),
            "inputSchema": { "type": "object", "properties": { "x": { "type": "string" } } },
        }),
    }
}

/// `add` with the schema features providers refuse (`schemas=verbose`); calls work the same.
fn verbose_add(server: &str) -> Value {
    let mut tool = base_tool("add", server);
    tool["inputSchema"] = json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "definitions": { "addend": { "type": "integer", "description": "an addend" } },
        "properties": {
            "a": { "$ref": "#/definitions/addend" },
            "b": { "$ref": "#/definitions/addend" },
            "mode": { "oneOf": [ { "const": "exact" }, { "const": "fast" } ] }
        },
        "required": ["a", "b"]
    });
    tool
}

fn base_tool(name: &str, server: &str) -> Value {
    let int = |d: &str| json!({ "type": "integer", "description": d });
    let (description, input, output) = match name {
        "add" => (
            "Add two integers.",
            json!({ "properties": { "a": int("first addend"), "b": int("second addend") },
                    "required": ["a", "b"], "additionalProperties": false }),
            Some(
                json!({ "type": "object", "properties": { "result": { "type": "integer" } },
                         "required": ["result"] }),
            ),
        ),
        "echo" => (
            "Return the text unchanged. `tag` is mirrored in the Mcp-Param-Tag header (2026-07-28).",
            json!({ "properties": { "text": { "type": "string" },
                                    "tag": { "type": "string", "x-mcp-header": "Tag" } },
                    "required": ["text"] }),
            None,
        ),
        "request_headers" => (
            "Return every HTTP header this server received for the call (lower-case names).",
            json!({ "properties": {} }),
            Some(json!({ "type": "object", "additionalProperties": { "type": "string" } })),
        ),
        "slow" => (
            "Sleep for `ms` milliseconds, then answer.",
            json!({ "properties": { "ms": int("milliseconds to sleep (max 600000)") },
                    "required": ["ms"] }),
            None,
        ),
        "fail" => (
            "Always fails with a tool error (isError: true).",
            json!({ "properties": {} }),
            None,
        ),
        _ => (
            "Ask the user to confirm a message (2026-07-28 multi-round-trip elicitation).",
            json!({ "properties": { "message": { "type": "string" } }, "required": ["message"] }),
            None,
        ),
    };
    let mut input = input;
    input["type"] = json!("object");
    let mut tool = json!({
        "name": name,
        "description": format!("{description} (server {server})"),
        "inputSchema": input,
    });
    if let Some(output) = output {
        tool["outputSchema"] = output;
    }
    tool
}

/// Everything a tool call may look at.
pub struct CallCtx<'a> {
    pub variant: &'a Variant,
    pub modern: bool,
    pub headers: &'a HeaderMap,
    pub params: &'a Value,
}

/// Runs `tools/call`.
pub async fn call_tool(ctx: &CallCtx<'_>) -> Result<Value, RpcError> {
    let name = ctx
        .params
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let empty = json!({});
    let args = ctx
        .params
        .get("arguments")
        .filter(|a| a.is_object())
        .unwrap_or(&empty);
    let v = ctx.variant;
    if v.account && name == "whoami" {
        let account =
            protocol::header_str(ctx.headers, crate::accounts::ACCOUNT_HEADER).unwrap_or_default();
        return Ok(json!({
            "content": [text(format!("account: {account}"))],
            "structuredContent": { "account": account },
        }));
    }
    if v.tools.is_none() && BASE_TOOLS.contains(&name) {
        return call_base(ctx, name, args).await;
    }
    let count = tool_count(v);
    let endless = v.cursor == CursorMode::Endless;
    let generated = name
        .strip_prefix("tool_")
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|i| format!("tool_{i}") == name)
        .is_some_and(|i| {
            if i < count {
                v.tools.is_some()
            } else {
                endless
            }
        });
    if generated {
        return Ok(json!({
            "content": [{ "type": "text", "text": format!("{name} ok") }],
            "structuredContent": { "tool": name, "arguments": args },
        }));
    }
    Err(RpcError::new(
        INVALID_PARAMS,
        format!("Unknown tool: {name}"),
    ))
}

async fn call_base(ctx: &CallCtx<'_>, name: &str, args: &Value) -> Result<Value, RpcError> {
    let server = &ctx.variant.name;
    Ok(match name {
        "add" => {
            let (Some(a), Some(b)) = (
                args.get("a").and_then(Value::as_i64),
                args.get("b").and_then(Value::as_i64),
            ) else {
                return Ok(tool_error("add: `a` and `b` must be integers"));
            };
            let Some(sum) = a.checked_add(b) else {
                return Ok(tool_error("add: integer overflow"));
            };
            json!({ "content": [text(sum.to_string())], "structuredContent": { "result": sum } })
        }
        "echo" => {
            let Some(t) = args.get("text").and_then(Value::as_str) else {
                return Ok(tool_error("echo: `text` must be a string"));
            };
            let tag = args.get("tag").and_then(Value::as_str);
            if ctx.modern {
                protocol::check_param_header(ctx.headers, "Tag", tag)?;
            }
            json!({ "content": [text(t.to_owned())] })
        }
        "request_headers" => {
            let all = Value::Object(protocol::headers_json(ctx.headers));
            json!({ "content": [text(all.to_string())], "structuredContent": all })
        }
        "slow" => {
            let ms = args
                .get("ms")
                .and_then(Value::as_u64)
                .unwrap_or(0)
                .min(600_000);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            json!({ "content": [text(format!("slept {ms} ms"))] })
        }
        "fail" => tool_error(&format!("fail: this tool always fails (server {server})")),
        _ => return confirm(ctx, args),
    })
}

/// `confirm`: a 2026-07-28 multi-round-trip request (MRTR). The first call asks the client
/// to elicit a confirmation; the retry carries `inputResponses` and the echoed `requestState`.
fn confirm(ctx: &CallCtx<'_>, args: &Value) -> Result<Value, RpcError> {
    if !ctx.modern {
        return Ok(tool_error(
            "confirm needs the 2026-07-28 protocol (multi-round-trip requests)",
        ));
    }
    let message = args
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("Proceed?");
    let answer = ctx
        .params
        .get("inputResponses")
        .and_then(|r| r.get("confirm"));
    let Some(answer) = answer else {
        let caps = ctx
            .params
            .pointer("/_meta/io.modelcontextprotocol~1clientCapabilities/elicitation");
        if caps.is_none() {
            return Err(RpcError::new(
                MISSING_CAPABILITY,
                "confirm requires the elicitation capability",
            )
            .with_data(json!({ "requiredCapabilities": { "elicitation": {} } })));
        }
        return Ok(json!({
            "resultType": "input_required",
            "inputRequests": { "confirm": { "method": "elicitation/create", "params": {
                "mode": "form", "message": message,
                "requestedSchema": { "type": "object",
                    "properties": { "ok": { "type": "boolean" } }, "required": ["ok"] } } } },
            "requestState": CONFIRM_STATE,
        }));
    };
    if ctx.params.get("requestState").and_then(Value::as_str) != Some(CONFIRM_STATE) {
        return Err(RpcError::new(
            INVALID_PARAMS,
            "confirm: requestState missing or altered",
        ));
    }
    let ok = answer.get("action").and_then(Value::as_str) == Some("accept")
        && answer.pointer("/content/ok").and_then(Value::as_bool) == Some(true);
    let verdict = if ok { "confirmed" } else { "declined" };
    Ok(json!({ "content": [text(format!("{verdict}: {message}"))],
               "structuredContent": { "confirmed": ok } }))
}

fn text(t: String) -> Value {
    json!({ "type": "text", "text": t })
}

fn tool_error(message: &str) -> Value {
    json!({ "content": [text(message.to_owned())], "isError": true })
}

pub fn list_prompts(v: &Variant) -> Value {
    json!({ "prompts": [{
        "name": "greet",
        "description": format!("Greet someone by name (server {}).", v.name),
        "arguments": [{ "name": "name", "description": "who to greet", "required": true }],
    }] })
}

pub fn get_prompt(v: &Variant, params: &Value) -> Result<Value, RpcError> {
    match params.get("name").and_then(Value::as_str) {
        Some("greet") => {}
        other => {
            return Err(RpcError::new(
                INVALID_PARAMS,
                format!("Unknown prompt: {}", other.unwrap_or("")),
            ));
        }
    }
    let who = params
        .pointer("/arguments/name")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::new(INVALID_PARAMS, "greet: missing required argument `name`"))?;
    Ok(json!({
        "description": "A greeting",
        "messages": [{ "role": "user", "content": text(format!("Hello, {who}! Greetings from {}.", v.name)) }],
    }))
}

pub fn list_resources(v: &Variant) -> Value {
    json!({ "resources": [{
        "uri": "example://readme", "name": "readme", "mimeType": "text/markdown",
        "description": format!("About this server ({}).", v.name),
    }] })
}

pub fn list_resource_templates() -> Value {
    json!({ "resourceTemplates": [{
        "uriTemplate": "example://items/{id}", "name": "item", "mimeType": "text/plain",
        "description": "One example item by id.",
    }] })
}

pub fn read_resource(params: &Value, modern: bool) -> Result<Value, RpcError> {
    let uri = params
        .get("uri")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (mime, body) = match uri.strip_prefix("example://items/") {
        _ if uri == "example://readme" => ("text/markdown", README.to_owned()),
        Some(id) if !id.is_empty() && !id.contains('/') => ("text/plain", format!("Item {id}")),
        _ => {
            let code = if modern {
                INVALID_PARAMS
            } else {
                RESOURCE_NOT_FOUND
            };
            return Err(RpcError::new(code, format!("Resource not found: {uri}"))
                .with_data(json!({ "uri": uri })));
        }
    };
    Ok(json!({ "contents": [{ "uri": uri, "mimeType": mime, "text": body }] }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::variants::parse;

    fn call(v: &Variant, params: Value) -> Result<Value, RpcError> {
        let headers = HeaderMap::new();
        let ctx = CallCtx {
            variant: v,
            modern: false,
            headers: &headers,
            params: &params,
        };
        futures_util::FutureExt::now_or_never(call_tool(&ctx)).expect("no sleeping tools here")
    }

    #[test]
    fn base_and_generated_tools() {
        let base = Variant::default();
        assert_eq!(tool_at(&base, 0)["name"], "add");
        assert_eq!(tool_at(&base, 7)["name"], "tool_7");
        let r = call(
            &base,
            json!({ "name": "add", "arguments": { "a": 2, "b": 40 } }),
        )
        .unwrap();
        assert_eq!(r["structuredContent"]["result"], 42);
        assert_eq!(
            call(&base, json!({ "name": "add", "arguments": { "a": "x" } })).unwrap()["isError"],
            true
        );
        assert_eq!(
            call(&base, json!({ "name": "tool_1" })).unwrap_err().code,
            INVALID_PARAMS
        );

        let gen3 = parse("tools=3").unwrap();
        assert_eq!(tool_at(&gen3, 0)["name"], "tool_0");
        assert!(call(&gen3, json!({ "name": "tool_2" })).is_ok());
        assert!(call(&gen3, json!({ "name": "tool_3" })).is_err());
        assert!(call(&gen3, json!({ "name": "add" })).is_err());
        let endless = parse("cursor=endless").unwrap();
        assert!(call(&endless, json!({ "name": "tool_99" })).is_ok());
    }

    #[test]
    fn resources_and_prompts() {
        assert!(read_resource(&json!({ "uri": "example://items/42" }), true).is_ok());
        assert_eq!(
            read_resource(&json!({ "uri": "example://nope" }), true)
                .unwrap_err()
                .code,
            INVALID_PARAMS
        );
        assert_eq!(
            read_resource(&json!({ "uri": "example://nope" }), false)
                .unwrap_err()
                .code,
            RESOURCE_NOT_FOUND
        );
        let v = Variant::default();
        assert!(
            get_prompt(
                &v,
                &json!({ "name": "greet", "arguments": { "name": "Ada" } })
            )
            .is_ok()
        );
        assert!(get_prompt(&v, &json!({ "name": "greet" })).is_err());
    }
}
