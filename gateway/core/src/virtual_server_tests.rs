//! The virtual server's rules on a table built from a config (a file of its own: the rules
//! module stays below the table).

mod tests {
    use crate::table::RoutingTable;
    use crate::virtual_server::*;
    use serde_json::json;
    use std::sync::Arc;
    use switchboard_snapshot::{SystemLookup, load};

    const CONFIG: &str = r#"
servers:
- {name: weather, url: "http://x/mcp", allowAllKeys: true}
- {name: files, url: "http://y/mcp", allowAllKeys: true}
virtualServers:
- name: desk
  sources:
  - server: weather
    tools: {allow: ["get_*"], deny: [get_secret]}
    overrides:
    - tool: get_forecast
      name: forecast
      title: Forecast
      description: The forecast.
      descriptionSuffix: Metric units.
      parameters:
        units: {fixed: metric}
        days: {enum: [1, 2], description: How many days}
  - server: files
    tools: {allow: ["get_*", "read"]}
"#;

    fn desk() -> Arc<VirtualServer> {
        let t = RoutingTable::build(&load(CONFIG, &SystemLookup).unwrap()).unwrap();
        t.virtual_by_path("desk").unwrap().clone()
    }

    #[test]
    fn a_virtual_server_cannot_take_a_servers_id() {
        // Keys name servers and virtual servers alike: one id must mean one thing.
        let config = "servers:\n- {name: weather, url: \"http://x/mcp\"}\n\
                      virtualServers:\n- {name: weather, path: desk, sources: [{server: weather}]}\n";
        let e = load(config, &SystemLookup).expect_err("the id is the server's");
        let text = e.to_string();
        assert!(
            text.contains("virtualServers[0].id") && text.contains("already the id of servers[0]"),
            "{text}"
        );
        // Control: another name is served.
        load(
            &config.replace("name: weather, path", "name: desk2, path"),
            &SystemLookup,
        )
        .expect("a virtual server with its own name");
    }

    /// MCP Apps: a source that selects tools presents the `ui://` resources they link to
    /// unless it writes a `resources` filter, which then decides alone.
    #[test]
    fn selected_tools_bring_their_ui_resources_unless_resources_are_filtered() {
        let vs = desk();
        let (source, own) = vs
            .route(Selected::Resources, "ui://weather/view.html")
            .expect("the first source's UI resource");
        assert_eq!(
            (source.server.id(), own),
            ("weather", "ui://weather/view.html")
        );
        assert!(vs.route(Selected::Resources, "file:///notes").is_none());
        let config = CONFIG.replace(
            "    tools: {allow: [\"get_*\", \"read\"]}",
            "    tools: {allow: [\"get_*\", \"read\"]}\n    resources: {allow: [\"file:*\"]}",
        );
        let t = RoutingTable::build(&load(&config, &SystemLookup).unwrap()).unwrap();
        let filtered = t.virtual_by_path("desk").unwrap();
        let files = &filtered.sources[1];
        assert!(files.selects(Selected::Resources, "file:///notes"));
        assert!(!files.selects(Selected::Resources, "ui://files/view.html"));
    }

    #[test]
    fn names_route_by_parse_first_source_wins_and_renames_hide_the_own_name() {
        let vs = desk();
        let route = |n| {
            vs.route(Selected::Tools, n)
                .map(|(s, own)| (s.server.id().to_string(), own.to_string()))
        };
        assert_eq!(
            route("forecast"),
            Some(("weather".into(), "get_forecast".into()))
        );
        assert_eq!(
            route("get_alerts"),
            Some(("weather".into(), "get_alerts".into()))
        );
        assert_eq!(route("read"), Some(("files".into(), "read".into())));
        assert_eq!(
            route("get_secret"),
            Some(("files".into(), "get_secret".into())),
            "weather denies it; files selects get_*"
        );
        assert_eq!(
            route("get_forecast"),
            Some(("files".into(), "get_forecast".into())),
            "renamed on weather"
        );
        assert_eq!(route("write"), None);
        assert_eq!(
            vs.presented_name(Selected::Tools, 0, "get_forecast"),
            Ok("forecast")
        );
        assert_eq!(
            vs.presented_name(Selected::Tools, 1, "get_alerts"),
            Err(Shadowed::By("get_alerts".into()))
        );
        assert_eq!(
            vs.presented_name(Selected::Tools, 1, "write"),
            Err(Shadowed::NotSelected)
        );
        assert_eq!(
            vs.presented_name(Selected::Prompts, 0, "x"),
            Err(Shadowed::NotSelected),
            "no prompts selected"
        );
    }

    #[test]
    fn presentation_renames_describes_and_narrows() {
        let vs = desk();
        let o = vs.sources[0].override_of("get_forecast");
        let tool = json!({"name": "get_forecast", "description": "Upstream text", "inputSchema": {
            "type": "object", "required": ["units", "city"],
            "properties": {"units": {"type": "string"}, "days": {"type": "integer", "enum": [1, 2, 3]}, "city": {"type": "string"}}}});
        let shown = present_tool(tool.as_object().unwrap().clone(), "forecast", o);
        assert_eq!(shown["name"], "forecast");
        assert_eq!(shown["title"], "Forecast");
        assert_eq!(shown["description"], "The forecast.\n\nMetric units.");
        assert_eq!(shown["inputSchema"]["required"], json!(["city"]));
        assert!(shown["inputSchema"]["properties"].get("units").is_none());
        assert_eq!(
            shown["inputSchema"]["properties"]["days"]["enum"],
            json!([1, 2])
        );
        assert_eq!(
            shown["inputSchema"]["properties"]["days"]["description"],
            "How many days"
        );
    }

    #[test]
    fn fixed_values_are_set_and_narrowed_enums_enforced() {
        let vs = desk();
        let o = vs.sources[0].override_of("get_forecast");
        let args = upstream_arguments(Some(json!({"city": "Oslo", "days": 2})), o).unwrap();
        assert_eq!(
            args,
            Some(json!({"city": "Oslo", "days": 2, "units": "metric"}))
        );
        let e = upstream_arguments(Some(json!({"days": 3})), o).unwrap_err();
        assert!(
            matches!(&e, ArgumentRefused::NotAllowed { param, .. } if param == "days"),
            "{e}"
        );
        assert!(e.to_string().contains("\"days\""), "{e}");
        let e = upstream_arguments(Some(json!({"units": "imperial"})), o).unwrap_err();
        assert_eq!(e, ArgumentRefused::Fixed("units".into()));
        assert_eq!(
            upstream_arguments(Some(json!([1])), o).unwrap_err(),
            ArgumentRefused::NotAnObject
        );
        assert_eq!(
            upstream_arguments(None, o).unwrap(),
            Some(json!({"units": "metric"}))
        );
    }

    #[test]
    fn a_virtual_servers_rules_judge_every_call_and_its_bound_arguments_are_never_presented() {
        let config = CONFIG.to_string()
            + r#"  arguments:
  - tools: [forecast]
    rule: 'args.city != "Atlantis"'
    message: no such city
  - tools: ["get_*"]
    bind: {asked_by: "${caller.key}"}
"#;
        let table = Arc::new(RoutingTable::build(&load(&config, &SystemLookup).unwrap()).unwrap());
        let vs = table.virtual_by_path("desk").unwrap().clone();
        let caller = crate::scope::Caller::probe(table.clone(), &vs.sources[0].server);
        let o = vs.sources[0].override_of("get_forecast");

        // Presented without the bound argument (and, as before, without the fixed one).
        let tool = json!({"name": "get_file", "inputSchema": {"type": "object",
            "properties": {"path": {"type": "string"}, "asked_by": {"type": "string"}},
            "required": ["path", "asked_by"]}});
        let shown = vs.present(tool.as_object().unwrap().clone(), "get_file", None);
        assert_eq!(
            shown["inputSchema"],
            json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})
        );
        // Control: a tool no binding covers keeps its parameters.
        let read = vs.present(tool.as_object().unwrap().clone(), "read", None);
        assert_eq!(read["inputSchema"], tool["inputSchema"]);

        // The rule refuses, naming itself and the virtual server; the fixed value still goes.
        let refused = caller
            .virtual_arguments(&vs, "forecast", o, Some(json!({"city": "Atlantis"})))
            .unwrap_err();
        assert!(
            matches!(&refused, CallRefused::Rule(r) if r.tool == "forecast"),
            "{refused:?}"
        );
        assert_eq!(
            refused.to_string(),
            "tool forecast: no such city (argument rule `args.city != \"Atlantis\"` of virtual server desk)"
        );
        assert_eq!(
            caller
                .virtual_arguments(&vs, "forecast", o, Some(json!({"city": "Oslo"})))
                .unwrap(),
            Some(json!({"city": "Oslo", "units": "metric"}))
        );
        // A binding sets the argument from the caller; a call that sets it otherwise is refused.
        assert_eq!(
            caller
                .virtual_arguments(&vs, "get_file", None, Some(json!({"path": "a"})))
                .unwrap(),
            Some(json!({"path": "a", "asked_by": "switchboard-probe"}))
        );
        let set = caller
            .virtual_arguments(
                &vs,
                "get_file",
                None,
                Some(json!({"path": "a", "asked_by": "mallory"})),
            )
            .unwrap_err();
        assert!(
            set.to_string()
                .contains("\"asked_by\" is set from the caller by virtual server desk"),
            "{set}"
        );
        // The presentation's own refusals stay what they were (the client's mistake).
        assert!(matches!(
            caller.virtual_arguments(&vs, "forecast", o, Some(json!({"units": "imperial"}))),
            Err(CallRefused::Presentation(ArgumentRefused::Fixed(_)))
        ));
    }

    #[test]
    fn a_virtual_servers_rule_that_does_not_compile_is_named_by_the_loader() {
        let config =
            CONFIG.to_string() + "  arguments:\n  - {tools: [forecast], rule: 'args.city =='}\n";
        let e = load(&config, &SystemLookup).expect_err("a rule that does not compile");
        assert!(
            e.to_string()
                .contains("virtualServers[0].arguments[0].rule"),
            "{e}"
        );
    }
}
