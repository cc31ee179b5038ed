//! Listeners and the admin listener.

use super::*;

#[test]
fn at_least_one_listener() {
    only(
        &format!("listeners: []\n{API}{DEFAULT_ROUTE}"),
        "listeners",
        "at least one",
    );
    only(
        &format!("{API}{DEFAULT_ROUTE}"),
        "listeners",
        "at least one",
    );
}

#[test]
fn listener_names_are_required_and_unique() {
    let two = |a: &str, b: &str| {
        format!(
            "listeners:\n  - {{ name: {a}, address: 127.0.0.1:8080 }}\n  - {{ name: {b}, address: 127.0.0.1:8088 }}\n{API}{DEFAULT_ROUTE}"
        )
    };
    only(&two("a", "\"\""), "listeners[1].name", "needs a name");
    only(
        &two("a", "a"),
        "listeners[1].name",
        "duplicate listener name \"a\" (also listeners[0])",
    );
    ok(&two("a", "b"));
}

fn listener_at(addr: &str) -> String {
    format!("listeners:\n  - {{ name: p, address: \"{addr}\" }}\n{API}{DEFAULT_ROUTE}")
}

#[test]
fn listener_addresses_parse() {
    let c = ok(&listener_at("localhost:8080"));
    assert_eq!(c.listeners[0].address, "127.0.0.1:8080".parse().unwrap());
    let c = ok(&listener_at("LocalHost:8080"));
    assert_eq!(c.listeners[0].address, "127.0.0.1:8080".parse().unwrap());
    let c = ok(&listener_at("[::1]:8080"));
    assert_eq!(c.listeners[0].address, "[::1]:8080".parse().unwrap());
    ok(&listener_at("0.0.0.0:80"));
    ok(&listener_at("127.0.0.1:0"));
    let bad = [
        ("", "required"),
        ("127.0.0.1", "needs a port"),
        ("localhost", "needs a port"),
        (
            "8080",
            "a bare port: write the IP too, like \"127.0.0.1:8080\"",
        ),
        (":8080", "has no host"),
        ("127.0.0.1:", "invalid port \"\""),
        ("127.0.0.1:65536", "invalid port \"65536\""),
        ("127.0.0.1:+80", "invalid port"),
        ("example.com:80", "only IP addresses and localhost"),
        ("::1", "write IPv6 as [address]:port"),
        ("[::1]", "needs a port"),
        ("[::1:8080", "missing \"]\""),
        ("[127.0.0.1]:80", "not an IPv6 address"),
        ("1:2:3", "expected ip:port"),
        ("http://127.0.0.1:8080", "has no scheme"),
    ];
    for (addr, needle) in bad {
        only(&listener_at(addr), "listeners[0].address", needle);
    }
}

#[test]
fn listeners_never_share_an_address() {
    let two = |a: &str, b: &str| {
        format!(
            "listeners:\n  - {{ name: a, address: \"{a}\" }}\n  - {{ name: b, address: \"{b}\" }}\n{API}{DEFAULT_ROUTE}"
        )
    };
    only(
        &two("127.0.0.1:8080", "localhost:8080"),
        "listeners[1].address",
        "conflicts with listeners[0].address",
    );
    only(
        &two("127.0.0.1:8080", "0.0.0.0:8080"),
        "listeners[1].address",
        "conflicts",
    );
    only(
        &two("0.0.0.0:8080", "10.0.0.1:8080"),
        "listeners[1].address",
        "conflicts",
    );
    only(
        &two("[::]:8080", "[::1]:8080"),
        "listeners[1].address",
        "conflicts",
    );
    ok(&two("127.0.0.1:8080", "127.0.0.1:8081"));
    ok(&two("127.0.0.1:8080", "127.0.0.2:8080"));
    ok(&two("0.0.0.0:8080", "[::1]:8080"));
    // Ephemeral ports never clash.
    ok(&two("127.0.0.1:0", "127.0.0.1:0"));
}

fn admin(section: &str) -> String {
    format!("{LISTENER}admin:\n{section}{API}{DEFAULT_ROUTE}")
}

#[test]
fn admin_address() {
    let c = ok(&admin("  address: 127.0.0.1:9000\n"));
    assert_eq!(c.admin.address, "127.0.0.1:9000".parse().unwrap());
    let c = ok(&admin("  token_env: TOKEN\n"));
    assert_eq!(c.admin.address, DEFAULT_ADMIN);
    assert_eq!(c.admin.token_env.as_deref(), Some("TOKEN"));
    only(
        &admin("  address: 127.0.0.1\n"),
        "admin.address",
        "needs a port",
    );
    only(
        &admin("  address: 127.0.0.1:8080\n"),
        "admin.address",
        "conflicts with listeners[0].address",
    );
    only(
        &admin("  address: localhost:8080\n"),
        "admin.address",
        "conflicts",
    );
}

#[test]
fn listeners_keep_off_the_default_admin_address() {
    let on = |addr: &str| {
        format!("listeners:\n  - {{ name: p, address: \"{addr}\" }}\n{API}{DEFAULT_ROUTE}")
    };
    only(
        &on("127.0.0.1:9901"),
        "listeners[0].address",
        "conflicts with the admin listener's default address 127.0.0.1:9901",
    );
    only(
        &on("0.0.0.0:9901"),
        "listeners[0].address",
        "set admin.address",
    );
    let moved = format!("listeners:\n  - {{ name: p, address: 127.0.0.1:9901 }}\nadmin: {{ token_env: T }}\n{API}{DEFAULT_ROUTE}");
    only(&moved, "listeners[0].address", "default address");
    let moved = format!("listeners:\n  - {{ name: p, address: 127.0.0.1:9901 }}\nadmin: {{ address: 127.0.0.1:9902 }}\n{API}{DEFAULT_ROUTE}");
    ok(&moved);
}

#[test]
fn admin_token_env_is_required_off_loopback() {
    only(
        &admin("  address: 0.0.0.0:9901\n"),
        "admin.token_env",
        "not loopback",
    );
    only(
        &admin("  address: 10.0.0.5:9901\n"),
        "admin.token_env",
        "10.0.0.5:9901",
    );
    only(
        &admin("  address: \"[::]:9901\"\n"),
        "admin.token_env",
        "not loopback",
    );
    ok(&admin(
        "  address: 0.0.0.0:9901\n  token_env: HOPGATE_ADMIN_TOKEN\n",
    ));
    ok(&admin("  address: \"[::1]:9901\"\n"));
    ok(&admin("  address: 127.0.0.2:9901\n"));
    only(
        &admin("  address: 0.0.0.0:9901\n  token_env: \"\"\n"),
        "admin.token_env",
        "invalid environment variable name",
    );
    only(
        &admin("  token_env: 1TOKEN\n"),
        "admin.token_env",
        "\"1TOKEN\"",
    );
    only(
        &admin("  token_env: MY-TOKEN\n"),
        "admin.token_env",
        "invalid",
    );
}
