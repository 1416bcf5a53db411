//! The enrollment file a new minion reads (`/etc/halite/enrollment.toml`: its masters, the key
//! to pin, its id and a one-time token) and the cloud-init user_data that writes it, rendered
//! the same way by the CLI and by the master's gateway.

/// The enrollment file's text.
pub fn enrollment_toml(masters: &[String], master_key_hex: &str, id: &str, token: &str) -> String {
    let quote = |s: &str| format!("{s:?}");
    let master = match masters {
        [one] => quote(one),
        many => format!("[{}]", many.iter().map(|m| quote(m)).collect::<Vec<_>>().join(", ")),
    };
    format!("master = {master}\nmaster_key = {}\nid = {}\ntoken = {}\n", quote(master_key_hex), quote(id), quote(token))
}

/// A `#cloud-config` document that writes `enrollment` to `/etc/halite/enrollment.toml`,
/// readable by root only.
pub fn cloud_config(enrollment: &str) -> String {
    let mut text = String::from(
        "#cloud-config\nwrite_files:\n  - path: /etc/halite/enrollment.toml\n    owner: root:root\n    \
         permissions: '0600'\n    content: |\n",
    );
    for line in enrollment.lines() {
        text.push_str("      ");
        text.push_str(line);
        text.push('\n');
    }
    text
}

/// Whether `addr` (host:port) is a loopback or unspecified address: useless to another machine.
pub fn only_this_host(addr: &str) -> bool {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host).trim_matches(['[', ']']);
    host == "localhost" || host.parse::<core::net::IpAddr>().is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_master_is_a_string_several_a_list_and_the_user_data_indents_the_file() {
        let one = enrollment_toml(&["10.0.0.1:4506".into()], "ab", "vm-1", "t\"k");
        assert_eq!(one, "master = \"10.0.0.1:4506\"\nmaster_key = \"ab\"\nid = \"vm-1\"\ntoken = \"t\\\"k\"\n");
        let two = enrollment_toml(&["a:1".into(), "b:2".into()], "ab", "vm-1", "t");
        assert!(two.starts_with("master = [\"a:1\", \"b:2\"]\n"), "{two}");
        let user_data = cloud_config(&one);
        assert!(user_data.starts_with("#cloud-config\nwrite_files:\n"), "{user_data}");
        assert!(user_data.contains("\n      id = \"vm-1\"\n"), "{user_data}");
        assert!(only_this_host("127.0.0.1:4506") && only_this_host("0.0.0.0:1") && only_this_host("[::1]:2"));
        assert!(!only_this_host("10.0.0.1:4506"));
    }
}
