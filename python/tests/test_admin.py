"""Keys, enrollment, principals and their ACLs, client config files, typed errors."""

from __future__ import annotations

from pathlib import Path

import pytest

import halite


def test_enrollment_user_data_enrolls_a_new_minion(master, root: halite.Client) -> None:
    enrollment = root.create_enrollment("app1", ttl=600, masters=[master.addr])
    assert enrollment.minion == "app1" and enrollment.masters == [master.addr]
    assert enrollment.master_key == master.master_key_hex
    assert enrollment.user_data.startswith("#cloud-config\nwrite_files:\n")
    assert f'token = "{enrollment.token}"' in enrollment.user_data
    assert any(t.minion == "app1" and not t.used for t in root.enrollment_tokens())
    directory = master.minion_dir("app1")
    directory.mkdir(parents=True)
    (directory / "enrollment.toml").write_text(enrollment.enrollment)
    master.start_minion("app1")
    assert [k.state for k in root.keys("app1")] == ["accepted"]
    assert any(t.minion == "app1" and t.used for t in root.enrollment_tokens())
    grains = root.run("app1", "grains.items")["app1"].outputs
    assert grains["role"] == "app" and grains["kernel"] == "Linux"


def test_a_token_for_an_enrolled_minion_is_refused_unless_it_replaces(master, root: halite.Client) -> None:
    # web1 is enrolled (its key accepted): a token would take its identity over.
    with pytest.raises(halite.Conflict, match="--replace") as refused:
        root.create_enrollment("web1", ttl=60)
    assert refused.value.kind == "conflict"
    replacing = root.create_enrollment("web1", ttl=60, replace=True)
    assert replacing.minion == "web1"
    ids = [t.id for t in root.enrollment_tokens() if t.minion == "web1" and not t.used]
    root.revoke_enrollment_token(ids[0])


def test_keys_are_listed_rejected_and_accepted(master, root: halite.Client) -> None:
    assert {k.id for k in root.keys("*")} >= {"web1", "web2", "db1"}
    assert root.reject_keys("db1") == ["db1"]
    assert [k.state for k in root.keys("db1")] == ["rejected"]
    assert root.accept_keys("db1") == ["db1"]
    master.wait_connected(["db1"])
    token = root.create_enrollment("spare", ttl=60)
    ids = [t.id for t in root.enrollment_tokens() if t.minion == "spare"]
    root.revoke_enrollment_token(ids[0])
    assert all(t.minion != "spare" for t in root.enrollment_tokens()), token


def test_a_principal_connects_with_its_key_and_is_held_to_its_acl(master, root: halite.Client, tmp_path: Path) -> None:
    key_file = tmp_path / "ops.key"
    public = halite.generate_key(str(key_file))
    assert halite.public_key(str(key_file)) == public
    with pytest.raises(FileExistsError):
        halite.generate_key(str(key_file))
    root.add_principal("ops", public, {"rules": [{"targets": "web*", "functions": ["test.*"]}]})
    assert "ops" in [p.name for p in root.principals()]
    with halite.Client.connect([master.addr], principal="ops", key_file=str(key_file),
                               master_key=master.master_key_hex) as ops:
        assert sorted(ops.run("web*", "test.ping")) == ["web1", "web2"]
        listed = ops.minions("*")
        assert [m.id for m in listed] == ["web1", "web2"]
        # One master: connected to it, never elsewhere.
        assert [(m.connected, m.connected_elsewhere) for m in listed] == [(True, False)] * 2
        # Minions outside its ACL do not exist for it; functions outside it are refused.
        with pytest.raises(halite.NotFound):
            ops.publish("db1", "test.ping")
        with pytest.raises(halite.Forbidden) as refused:
            ops.publish("web1", "cmd.run", ["id"])
        assert refused.value.kind == "forbidden" and isinstance(refused.value, PermissionError)
        with pytest.raises(halite.Forbidden):
            ops.accept_keys("*")
    # The same, from a client config file (key path relative to it, master key as a path).
    config = tmp_path / "client.toml"
    config.write_text(
        f'masters = ["{master.addr}"]\nmaster_key = "{master.dir / "master" / "master.pub"}"\n'
        'principal = "ops"\nkey_file = "ops.key"\nrequest_timeout_secs = 5\n'
    )
    with halite.Client.from_config(str(config)) as ops:
        assert ops.run("web1", "test.echo", ["from a file"])["web1"].outputs == "from a file"
    root.remove_principal("ops")
    with pytest.raises(halite.ConnectError):
        halite.Client.from_config(str(config))


def test_gateway_tokens_are_created_listed_and_revoked(root: halite.Client) -> None:
    token = root.create_api_token("root", ttl=3600)
    assert len(token) > 20
    listed = root.api_tokens()
    assert listed and all(t.principal == "root" for t in listed)
    root.revoke_api_token(listed[-1].id)
    assert len(root.api_tokens()) == len(listed) - 1


def test_errors_are_typed_and_name_the_problem(master, tmp_path: Path) -> None:
    with pytest.raises(halite.ConfigError, match="key_file"):
        halite.Client.connect([master.addr], principal="x", key_file=str(tmp_path / "missing.key"),
                              master_key=master.master_key_hex)
    with pytest.raises(halite.ConfigError, match="master_key"):
        halite.Client.connect([master.addr], principal="x", key_file=str(tmp_path / "k"))
    with pytest.raises(halite.ConfigError, match="no master"):
        halite.Client.connect()
    key = tmp_path / "stranger.key"
    halite.generate_key(str(key))
    # A principal the master does not know, then a master key that is not this master's.
    with pytest.raises(halite.ConnectError) as unknown:
        halite.Client.connect([master.addr], principal="stranger", key_file=str(key),
                              master_key=master.master_key_hex, connect_timeout=5)
    assert unknown.value.addr == master.addr
    impostor = halite.generate_key(str(tmp_path / "impostor.key"))
    with pytest.raises(halite.ConnectError):
        halite.Client.connect([master.addr], principal="stranger", key_file=str(key),
                              master_key=impostor, connect_timeout=5)
    with pytest.raises(halite.ConfigError, match="weak"):
        halite.Client.connect([master.addr], principal="stranger", key_file=str(key), master_key="00" * 32)
    with master.root() as root:
        with pytest.raises(halite.NotFound) as missing:
            root.job("20990101000000000000")
        assert isinstance(missing.value, LookupError) and missing.value.kind == "not_found"
        # Bad arguments are HaliteErrors too (and the built-in errors they are).
        with pytest.raises(halite.InvalidArgument, match="public key") as bad_key:
            root.preseed_key("x", "zz")
        assert isinstance(bad_key.value, (halite.HaliteError, ValueError))
        with pytest.raises(halite.InvalidArgument, match="JSON") as not_json:
            root.publish("web1", "test.echo", [object()])
        assert isinstance(not_json.value, TypeError)
    closed = master.root()
    closed.close()
    with pytest.raises(halite.DisconnectedError):
        closed.keys()
