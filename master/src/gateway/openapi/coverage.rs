//! The OpenAPI document names exactly the routes the gateway serves, method by method. axum
//! cannot list a router's routes, so they are read from the source that registers them:
//! `routes::router` and the routers it merges. A route added without its document entry (or
//! an entry left behind by a removed route) fails here, before a client generator meets it.

use std::collections::BTreeSet;

use serde_json::Value;

/// The source of `routes::router`.
const ROUTER: &str = include_str!("../routes.rs");

/// The routers `routes::router` merges, by the call that merges them, with their source.
const MERGED: &[(&str, &str)] = &[
    ("super::fleet::routes(", include_str!("../fleet.rs")),
    ("super::principals::routes(", include_str!("../principals.rs")),
    ("super::audit::routes(", include_str!("../audit.rs")),
    ("crate::metrics_http::health(", include_str!("../../metrics_http.rs")),
];

/// The methods axum's routing functions are named after.
const METHODS: &[&str] = &["get", "post", "put", "delete", "patch", "head", "options", "trace"];

/// `(path, method)` for each `.route("path", method(handler).method(handler))` in `source`.
fn routes_in(source: &str) -> BTreeSet<(String, String)> {
    let mut found = BTreeSet::new();
    for (at, _) in source.match_indices(".route(") {
        let rest = &source[at + ".route(".len()..];
        let rest = rest.trim_start();
        let path = rest.strip_prefix('"').and_then(|r| r.split_once('"')).map(|(p, _)| p);
        let path = path.unwrap_or_else(|| panic!("a .route( whose path is not a literal: {}", &rest[..40]));
        for method in methods_of(&rest[path.len() + 2..]) {
            found.insert((path.to_owned(), method));
        }
    }
    found
}

/// The routing calls directly inside one `.route(` call (`get(..).post(..)`,
/// `axum::routing::delete(..)`), given the text after its path; handlers and closures nested in
/// them are skipped.
fn methods_of(args: &str) -> Vec<String> {
    let mut methods = Vec::new();
    let mut depth = 1;
    let mut word = String::new();
    let mut chars = args.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                // A string literal: parentheses in it are text.
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
            }
            '(' => {
                if depth == 1 && !word.is_empty() {
                    assert!(METHODS.contains(&word.as_str()), "a route registered through `{word}(`: teach this test");
                    methods.push(word.clone());
                }
                depth += 1;
            }
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return methods;
                }
            }
            _ => {}
        }
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            word.clear();
        }
    }
    panic!("a .route( call that does not end");
}

/// The body of `fn name` in `source` (to its closing brace at the start of a line).
fn function<'a>(source: &'a str, name: &str) -> &'a str {
    let start = source.find(&format!("fn {name}")).unwrap_or_else(|| panic!("no fn {name}"));
    let body = &source[start..];
    &body[..body.find("\n}\n").unwrap_or(body.len())]
}

/// Every route the gateway serves.
fn served() -> BTreeSet<(String, String)> {
    let router = function(ROUTER, "router");
    let mut routes = routes_in(router);
    let merges = router.matches(".merge(").count();
    let known = MERGED.iter().filter(|(call, _)| router.contains(&format!(".merge({call}"))).count();
    assert_eq!(merges, known, "routes::router merges a router this test does not read: add it to MERGED");
    for (call, source) in MERGED {
        let name = call.trim_end_matches('(').rsplit("::").next().unwrap_or_default();
        routes.extend(routes_in(function(source, name)));
    }
    assert!(!router.contains(".nest("), "a nested router: teach this test its prefix");
    routes
}

/// Every `(path, method)` the document describes.
fn documented() -> BTreeSet<(String, String)> {
    let doc = super::document();
    let paths = doc["paths"].as_object().expect("paths");
    paths
        .iter()
        .flat_map(|(path, item)| {
            let methods = item.as_object().expect("a path item").keys();
            methods.map(move |method| (path.clone(), method.clone()))
        })
        .collect()
}

#[test]
fn the_document_names_every_route_the_gateway_serves_and_no_other() {
    let served = served();
    let documented = documented();
    assert!(served.len() > 30, "the routes were not found: {served:?}");
    let missing: Vec<_> = served.difference(&documented).collect();
    assert!(missing.is_empty(), "served but not in openapi.rs: {missing:?}");
    let stale: Vec<_> = documented.difference(&served).collect();
    assert!(stale.is_empty(), "in openapi.rs but not served: {stale:?}");
}

#[test]
fn the_route_reader_sees_methods_but_not_handlers() {
    let source = r#"Router::new()
        .route("/a", get(list).post(move |s: Authed| async move { make(s, "(").await }))
        .route("/b/{id}", axum::routing::delete(remove))"#;
    let routes: Vec<_> = routes_in(source).into_iter().collect();
    let expected = [("/a", "get"), ("/a", "post"), ("/b/{id}", "delete")];
    assert_eq!(routes, expected.map(|(p, m)| (p.to_owned(), m.to_owned())));
}

#[test]
fn health_checks_are_public_and_metrics_need_a_token() {
    let doc = super::document();
    for public in ["/healthz", "/readyz"] {
        assert_eq!(doc["paths"][public]["get"]["security"], serde_json::json!([]), "{public}");
    }
    let metrics = &doc["paths"]["/metrics"]["get"];
    assert!(metrics.get("security").is_none(), "the document's bearer security applies");
    let responses = metrics["responses"].as_object().expect("responses");
    assert!(responses.contains_key("401") && responses.contains_key("403"), "{metrics}");
    let types: Vec<&String> = metrics["responses"]["200"]["content"].as_object().expect("content").keys().collect();
    assert_eq!(types, ["text/plain", "application/openmetrics-text"]);
    assert!(doc["paths"]["/readyz"]["get"]["responses"].get("503").is_some_and(Value::is_object));
}
