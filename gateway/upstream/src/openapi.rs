//! An OpenAPI-backed server answered as a stateless MCP server: `tools/list` from its compiled
//! document, `tools/call` as the REST request the operation describes, sent with the server's
//! credential, TLS, timeout, redirect and address rules (the same `send_following` as every
//! MCP request), and the response turned into a tool result.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use serde_json::{Value, json};
use switchboard_core::table::OpenApiTools;
use switchboard_openapi::Compiled;
use tokio::time::Instant;

use crate::client::{
    MAX_UPSTREAM_BODY, RpcCall, RpcOutcome, RpcResult, UpstreamState, Upstreams, timeout_error,
    www_authenticate,
};
use crate::error::UpstreamError;
use crate::http_client;
use crate::listing::Listing;

/// Runs CPU-heavy work on the blocking pool; a task that panicked is a document error.
async fn off_runtime<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, switchboard_openapi::DocumentError> + Send + 'static,
) -> Result<T, switchboard_openapi::DocumentError> {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| {
        Err(switchboard_openapi::DocumentError {
            path: String::new(),
            message: format!("compiling stopped: {e}"),
        })
    })
}

impl Upstreams {
    pub(crate) async fn openapi(
        &self,
        call: &RpcCall<'_>,
        state: &UpstreamState,
        tools: &OpenApiTools,
    ) -> Result<RpcOutcome, UpstreamError> {
        let result = |value: Value| Ok(RpcOutcome::Result(RpcResult::Parsed(value)));
        match call.method() {
            // (as text: a large listing is never a tree)
            "tools/list" => Ok(RpcOutcome::Result(RpcResult::Raw(
                self.document(call, state, tools).await?.listing().into(),
            ))),
            "tools/call" => {
                let document = self.document(call, state, tools).await?;
                let params = call.params();
                let name = params
                    .and_then(|p| p.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let Some(tool) = document.tool(name) else {
                    return Ok(RpcOutcome::Error(
                        json!({"code": -32602, "message": format!("unknown tool {name:?}")}),
                        StatusCode::BAD_REQUEST,
                    ));
                };
                let arguments = params
                    .and_then(|p| p.get("arguments"))
                    .and_then(Value::as_object);
                let request = match tool.request(arguments) {
                    Ok(request) => request,
                    // The model can correct its arguments: a tool error, not a protocol one.
                    Err(refused) => {
                        return result(json!({
                            "content": [{"type": "text", "text": refused.to_string()}],
                            "isError": true,
                        }));
                    }
                };
                let (status, content_type, body) = self.rest_call(call, request).await?;
                result(tool.result(status, content_type.as_deref(), &body))
            }
            "server/discover" => result(json!({
                "resultType": "complete",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": call.server.id(), "version": "openapi"},
            })),
            "ping" => result(json!({})),
            // A REST API has no prompts or resources: empty lists, so an aggregate listing
            // does not report it as failing.
            "prompts/list" => result(json!({"prompts": []})),
            "resources/list" => result(json!({"resources": []})),
            "resources/templates/list" => result(json!({"resourceTemplates": []})),
            other => Ok(RpcOutcome::Error(
                json!({"code": -32601, "message": format!("method {other:?} is not served by an OpenAPI server")}),
                StatusCode::NOT_FOUND,
            )),
        }
    }

    /// An OpenAPI server's tools listing, from its compiled document rather than from the
    /// text a `tools/list` answer would be ([`Listing::of_operations`]), under the call's
    /// deadline.
    pub(crate) async fn openapi_listing(
        &self,
        call: &RpcCall<'_>,
        tools: &OpenApiTools,
    ) -> Result<Listing, UpstreamError> {
        let state = self.state(call.server);
        state.answers_as_modern();
        match tokio::time::timeout_at(call.deadline, self.document(call, &state, tools)).await {
            Ok(document) => Ok(Listing::of_operations(&document?)),
            Err(_) => Err(timeout_error(call)),
        }
    }

    /// The server's compiled document: the inline one, or the fetched one while it is fresh.
    async fn document(
        &self,
        call: &RpcCall<'_>,
        state: &UpstreamState,
        tools: &OpenApiTools,
    ) -> Result<Arc<Compiled>, UpstreamError> {
        let url = match tools {
            OpenApiTools::Compiled(compiled) => return Ok(compiled.clone()),
            OpenApiTools::Fetched(url) => url,
        };
        let ttl = Duration::from_millis(self.document_ttl_ms.load(Ordering::Relaxed));
        // One fetch at a time per server; the others wait for it and use what it got.
        let mut cached = state.document.lock().await;
        if let Some((at, compiled)) = cached.as_ref()
            && at.elapsed() < ttl
        {
            return Ok(compiled.clone());
        }
        let unavailable = |detail: String| UpstreamError::Unavailable {
            server: call.server.id().to_string(),
            detail,
        };
        let text = self.fetch_document(call, url, true).await?;
        // (parsing and compiling a large description takes a CPU for a while: off the
        // runtime's threads, which go on serving every other request meanwhile)
        let main = off_runtime(move || switchboard_openapi::parse(&text))
            .await
            .map_err(|e| unavailable(format!("the OpenAPI document {url}: {e}")))?;
        // References into other documents: fetched (the credential only where the main
        // document got it: the same origin), at most MAX_DOCUMENTS, then copied in.
        let mut remote = HashMap::new();
        let mut failed = Vec::new();
        let mut wanted = switchboard_openapi::remote_documents(&main, url, url, &remote);
        while let Some(next) = wanted.pop() {
            if remote.len() + failed.len() >= switchboard_openapi::MAX_DOCUMENTS {
                failed.push(format!(
                    "{next}: not fetched (more than {} documents)",
                    switchboard_openapi::MAX_DOCUMENTS
                ));
                continue;
            }
            let same_origin = next.origin() == url.origin();
            let parsed = match self.fetch_document(call, &next, same_origin).await {
                Ok(text) => switchboard_openapi::parse(&text).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match parsed {
                Ok(document) => {
                    let more =
                        switchboard_openapi::remote_documents(&document, &next, url, &remote);
                    remote.insert(next, document);
                    for u in more {
                        if !wanted.contains(&u) {
                            wanted.push(u);
                        }
                    }
                }
                Err(why) => failed.push(format!("{next}: {why}")),
            }
        }
        let spec = call.server.spec.openapi.clone().unwrap_or_default();
        let base = url.clone();
        let mut compiled = off_runtime(move || {
            let document = switchboard_openapi::bundle(main, &base, &remote);
            switchboard_openapi::compile_document(&document, &spec)
        })
        .await
        .map_err(|e| unavailable(format!("the OpenAPI document {url}: {e}")))?;
        compiled.problems.extend(failed.into_iter().map(|message| {
            switchboard_openapi::DocumentError {
                path: String::new(),
                message: format!("a referenced document could not be read: {message}"),
            }
        }));
        for problem in &compiled.problems {
            tracing::warn!(server = call.server.id(), %problem, "an OpenAPI operation is left out");
        }
        let compiled = Arc::new(compiled);
        *cached = Some((Instant::now(), compiled.clone()));
        Ok(compiled)
    }

    /// One document's text: GET with the server's headers (and credential when `credential`),
    /// under the redirect and address rules of every upstream request; a 401 is the
    /// credential refused, like a listing's.
    async fn fetch_document(
        &self,
        call: &RpcCall<'_>,
        url: &url::Url,
        credential: bool,
    ) -> Result<String, UpstreamError> {
        let unavailable = |detail: String| UpstreamError::Unavailable {
            server: call.server.id().to_string(),
            detail,
        };
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, application/yaml;q=0.9, */*;q=0.5"),
        );
        if credential {
            call.server.headers.apply(
                call.caller_headers,
                call.credential.map(|c| &c.value),
                &mut headers,
            );
        }
        let sent = self
            .send_following(
                call,
                http::Method::GET,
                Some(url.clone()),
                &|| headers.clone(),
                None,
            )
            .await?;
        let status = sent.status;
        let (parts, body) = sent.response.into_parts();
        if status == StatusCode::UNAUTHORIZED && credential {
            return Err(UpstreamError::Unauthorized {
                server: call.server.id().to_string(),
                challenge: www_authenticate(&parts.headers),
            });
        }
        if !status.is_success() {
            return Err(unavailable(format!(
                "fetching the OpenAPI document {url}: HTTP {}",
                status.as_u16()
            )));
        }
        let body = http_client::read_limited(body, MAX_UPSTREAM_BODY)
            .await
            .map_err(|e| UpstreamError::http(call.server, e))?;
        String::from_utf8(body.to_vec())
            .map_err(|_| unavailable(format!("the OpenAPI document {url} is not UTF-8")))
    }

    /// Sends one operation's request; a 401 is the server's credential refused (renewed or
    /// relayed like an MCP upstream's), every other status is the tool's answer.
    async fn rest_call(
        &self,
        call: &RpcCall<'_>,
        request: switchboard_openapi::RestRequest,
    ) -> Result<(StatusCode, Option<String>, bytes::Bytes), UpstreamError> {
        let server = call.server;
        let base = server.url.as_str().trim_end_matches('/');
        let url = url::Url::parse(&format!("{base}{}", request.path_and_query)).map_err(|e| {
            UpstreamError::Unavailable {
                server: server.id().to_string(),
                detail: format!("the operation's URL is not valid: {e}"),
            }
        })?;
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, */*;q=0.5"),
        );
        for (name, value) in &request.headers {
            // The compiler refused CR/LF; a name the document made up that is no header name
            // is left out.
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                headers.append(name, value);
            }
        }
        // The credential goes in last: no argument can take its slot.
        server.headers.apply(
            call.caller_headers,
            call.credential.map(|c| &c.value),
            &mut headers,
        );
        let body = request
            .body
            .map(|(media_type, b)| (media_type, bytes::Bytes::from(b)));
        let sent = self
            .send_following(call, request.method, Some(url), &|| headers.clone(), body)
            .await?;
        let status = sent.status;
        let (parts, body) = sent.response.into_parts();
        if status == StatusCode::UNAUTHORIZED {
            return Err(UpstreamError::Unauthorized {
                server: server.id().to_string(),
                challenge: www_authenticate(&parts.headers),
            });
        }
        let body = http_client::read_limited(body, MAX_UPSTREAM_BODY)
            .await
            .map_err(|e| UpstreamError::http(server, e))?;
        let content_type = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        Ok((status, content_type, body))
    }
}
