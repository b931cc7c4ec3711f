//! The XML in `dbus/` is the contract: this test keeps it equal to what the daemon serves.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::PermissionsExt;

use zbus::Variant;

use support::*;

/// An interface reduced to what clients rely on: members with their arguments and annotations
/// (documentation and code generators' hints left out).
type Shape = BTreeMap<String, Vec<String>>;

fn shapes(xml: &str) -> BTreeMap<String, Shape> {
    let doc = roxmltree::Document::parse_with_options(
        xml,
        roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        },
    )
    .unwrap();
    let mut out = BTreeMap::new();
    for iface in doc
        .root_element()
        .children()
        .filter(|n| n.has_tag_name("interface"))
    {
        let name = iface.attribute("name").unwrap().to_owned();
        if !name.starts_with("org.botvisor.") {
            continue;
        }
        let mut shape = Shape::new();
        for member in iface.children().filter(|n| n.is_element()) {
            let key = format!(
                "{} {}",
                member.tag_name().name(),
                member.attribute("name").unwrap_or_default()
            );
            let mut parts = Vec::new();
            for attr in ["type", "access"] {
                if let Some(v) = member.attribute(attr) {
                    parts.push(format!("{attr}={v}"));
                }
            }
            for child in member.children().filter(|n| n.is_element()) {
                match child.tag_name().name() {
                    "arg" => parts.push(format!(
                        "arg {} {} {}",
                        child.attribute("name").unwrap_or_default(),
                        child.attribute("type").unwrap_or_default(),
                        child.attribute("direction").unwrap_or("out")
                    )),
                    "annotation" => {
                        let n = child.attribute("name").unwrap_or_default();
                        // Documentation, and hints for the code generators (gdbus-codegen,
                        // qdbusxml2cpp) that a server does not serve: tests/fake/codegen.rs checks
                        // those.
                        let client_only = n == "org.gtk.GDBus.DocString"
                            || n.starts_with("org.gtk.GDBus.C.")
                            || n.starts_with("org.qtproject.QtDBus.");
                        if !client_only {
                            parts.push(format!(
                                "annotation {n}={}",
                                child.attribute("value").unwrap_or_default()
                            ));
                        }
                    }
                    _ => {}
                }
            }
            shape.insert(key, parts);
        }
        out.insert(name, shape);
    }
    out
}

async fn introspect(conn: &zbus::Connection, path: &str) -> String {
    zbus::fdo::IntrospectableProxy::builder(conn)
        .destination("org.botvisor.Botvisor1")
        .path(path.to_owned())
        .build()
        .await
        .unwrap()
        .introspect()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_xml_contract_equals_what_the_daemon_serves() {
    let env = TestEnv::new().await;
    let cli = env.dir.path().join("claude-placeholder");
    std::fs::write(&cli, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&cli, std::fs::Permissions::from_mode(0o755)).unwrap();
    let _daemon = Daemon::start(&env.daemon_config(Some(cli)), &env.conn).await;
    let work = env.work.to_str().unwrap().to_owned();
    let path = env
        .manager()
        .await
        .create_bot(HashMap::from([("cwd", Variant::from(work.as_str()))]))
        .await
        .unwrap();

    let mut served = shapes(&introspect(&env.conn, "/org/botvisor/Botvisor1").await);
    served.extend(shapes(&introspect(&env.conn, path.as_str()).await));
    let contract_text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/dbus/org.botvisor.Botvisor1.xml"
    ))
    .unwrap();
    let contract = shapes(&contract_text);
    assert_eq!(
        contract.keys().collect::<Vec<_>>(),
        vec![
            "org.botvisor.Botvisor1.Bot",
            "org.botvisor.Botvisor1.Manager",
            "org.botvisor.Botvisor1.Schedules"
        ]
    );
    for (name, shape) in &contract {
        let got = served
            .get(name)
            .unwrap_or_else(|| panic!("{name} is not served"));
        for (member, parts) in shape {
            assert_eq!(
                got.get(member),
                Some(parts),
                "{name} {member}: dbus/org.botvisor.Botvisor1.xml differs from the daemon"
            );
        }
        for member in got.keys() {
            assert!(
                shape.contains_key(member),
                "{name} {member} is served but missing from dbus/org.botvisor.Botvisor1.xml"
            );
        }
    }
    // Every member of the contract is documented.
    assert!(!contract_text.contains("<method name=\"X\""));
    let documented = contract_text.matches("org.gtk.GDBus.DocString").count();
    let members: usize = contract.values().map(|s| s.len()).sum();
    assert_eq!(documented, members, "every member has a DocString");
}
