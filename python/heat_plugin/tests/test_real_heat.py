"""The halite plugin in a real Heat, driven through Heat's REST API as an operator
would: the real heat-engine (two workers, RabbitMQ) and heat-api processes, Heat's
database on PostgreSQL, ``noauth`` (each request names its project), no Nova:
servers are minions the test starts from the user_data their stacks made.

Two projects share the master in tenant mode: each deploys to its own servers and
neither reaches the other's, also when their ids differ only in case and punctuation;
a group changes in place with Heat's rolling_update; a stack whose server vanished is
deleted at once.

Every wait is for a state (a stack's or resource's in Heat's API) or an event (a
minion's connection on halite's bus), bounded by waiting.TIMEOUT.

Needs HALITE_TEST_POSTGRES (scripts/test.sh starts one) and rabbitmq-server."""

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml

import halite

HERE = Path(__file__).resolve().parent
import sys  # noqa: E402

sys.path.insert(0, str(HERE.parent.parent / "tests"))
from processes import Master  # noqa: E402
from real_heat import RealHeat  # noqa: E402
from waiting import connecting  # noqa: E402

pytestmark = pytest.mark.skipif(not os.environ.get("HALITE_TEST_POSTGRES"),
                                reason="needs HALITE_TEST_POSTGRES (scripts/test.sh starts a server)")

SCRIPT = """#!/bin/sh
echo "$deploy_action $greeting on $deploy_server_id" >> "$marker"
printf '%s, %s' "$greeting" "$deploy_server_id" > "$heat_outputs_path.result"
"""

SERVER_TEMPLATE = """
heat_template_version: 2018-08-31
parameters:
  marker: {type: string}
  script: {type: string}
  greeting: {type: string, default: hello}
resources:
  enroll:
    type: OS::Halite::EnrollmentUserData
    properties: {server_name: vm1}
  config:
    type: OS::Halite::SoftwareConfig
    properties:
      group: script
      config: {get_param: script}
      inputs: [{name: greeting}, {name: marker}]
      outputs: [{name: result}]
  deployment:
    type: OS::Halite::SoftwareDeployment
    properties:
      config: {get_resource: config}
      server: vm1
      actions: [CREATE, UPDATE, DELETE]
      input_values: {greeting: {get_param: greeting}, marker: {get_param: marker}}
outputs:
  result: {value: {get_attr: [deployment, result]}}
"""

GROUP_TEMPLATE = """
heat_template_version: 2018-08-31
parameters:
  marker: {type: string}
  script: {type: string}
  greeting: {type: string, default: hi}
  servers: {type: json}
resources:
  config:
    type: OS::Halite::SoftwareConfig
    properties:
      group: script
      config: {get_param: script}
      inputs: [{name: greeting}, {name: marker}]
      outputs: [{name: result}]
  group:
    type: OS::Halite::SoftwareDeploymentGroup
    update_policy: {rolling_update: {max_batch_size: 1, pause_time: 0}}
    properties:
      config: {get_resource: config}
      servers: {get_param: servers}
      actions: [CREATE, UPDATE, DELETE]
      input_values: {greeting: {get_param: greeting}, marker: {get_param: marker}}
outputs:
  results: {value: {get_attr: [group, result]}}
"""


@pytest.fixture(scope="module")
def world():
    directory = Path(tempfile.mkdtemp(prefix="halite-real-heat-"))
    (directory / "halite").mkdir()
    master = Master(directory / "halite")
    heat = None
    try:
        root = master.root()
        key = directory / "heat.key"
        public = halite.generate_key(str(key))
        root.add_principal("heat", public, {
            "admin": True, "rules": [{"targets": "*", "functions": ["deploy.apply"]}],
            "events": ["halite/deployment/*", "halite/deployment_group/*"]})
        client_config = directory / "heat-client.toml"
        client_config.write_text(f'masters = ["{master.addr}"]\nmaster_key = "{master.master_key_hex}"\n'
                                 f'principal = "heat"\nkey_file = "{key}"\n')
        secret = directory / "tenants.secret"
        secret.write_text("a-secret-of-well-over-thirty-two-bytes")
        secret.chmod(0o600)
        heat = RealHeat(directory / "heat", os.environ["HALITE_TEST_POSTGRES"], "\n".join([
            f"client_config = {client_config}",
            f"tenant_secret_file = {secret}",
            f"tenant_key_dir = {directory / 'tenant-keys'}",
            "literal_servers = *",
            "check_wait = 1",
        ]))
        yield master, heat, root, directory
    finally:
        if heat is not None:
            heat.stop()
        master.stop()
        shutil.rmtree(directory, ignore_errors=True)


def boot_from_user_data(master, heat, project, name, stack_id, minion_dir):
    """The server a stack's enrollment made: its minion started from the user_data, once
    the enrollment resource is CREATE_COMPLETE (the rest of the stack waits for the
    minion: its deployment completes once it connects)."""
    enroll = heat.settle_resource(project, name, stack_id, "enroll", with_attr="user_data")
    assert enroll["resource_status"] == "CREATE_COMPLETE", (enroll["resource_status"],
                                                             enroll["resource_status_reason"])
    document = yaml.safe_load(enroll["attributes"]["user_data"])
    directory = master.minion_dir(minion_dir)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "enrollment.toml").write_text(document["write_files"][0]["content"])
    master.start_minion(minion_dir, wait=False)


def test_two_projects_each_deploy_to_their_own_servers_and_never_reach_the_others(world):
    master, heat, root, directory = world
    marker = directory / "projects.log"
    params = {"marker": str(marker), "script": SCRIPT}
    stacks = {}
    for project in ("proja", "projb"):
        stacks[project] = heat.create(project, "app", SERVER_TEMPLATE, dict(params, greeting=project))
        # Each project's "vm1" is a server of its own, booted from its own user_data.
        boot_from_user_data(master, heat, project, "app", stacks[project], f"{project}-guest")
    for project in ("proja", "projb"):
        stack = heat.settle(project, "app", stacks[project])
        assert stack["stack_status"] == "CREATE_COMPLETE", stack["stack_status_reason"]
        assert heat.output(stack, "result") == f"{project}, {project}-vm1"
    assert sorted(marker.read_text().splitlines()) == ["CREATE proja on proja-vm1", "CREATE projb on projb-vm1"]
    principals = {p.name: p.acl for p in root.principals()}
    assert principals["heat-proja"]["tenant"] == "proja" and principals["heat-projb"]["tenant"] == "projb"
    # Through halite, a project's principal sees its own deployments and servers alone.
    b = halite.Client.connect([master.addr], principal="heat-projb",
                              key_file=str(directory / "tenant-keys" / "heat-projb.key"),
                              master_key=master.master_key_hex)
    assert [d.server_id for d in b.list_deployments()] == ["projb-vm1"]
    assert b.minions("proja-*") == []
    b.close()

    # An update runs UPDATE on that project's server alone.
    heat.update("proja", "app", stacks["proja"], SERVER_TEMPLATE, dict(params, greeting="bonjour"))
    stack = heat.settle("proja", "app", stacks["proja"])
    assert stack["stack_status"] == "UPDATE_COMPLETE", stack["stack_status_reason"]
    assert heat.output(stack, "result") == "bonjour, proja-vm1"
    assert marker.read_text().splitlines()[-1] == "UPDATE bonjour on proja-vm1"

    # Project B's server vanishes (its key is deleted): its stack still deletes at once,
    # without waiting for the server (the wait's bound, 180 s, is below the master's
    # deployment_delete_wait_secs, 300 s, and the stack's own timeout, 5 minutes).
    root.delete_keys("projb-vm1")
    heat.delete("projb", "app", stacks["projb"])
    stack = heat.settle("projb", "app", stacks["projb"])
    assert stack["stack_status"] == "DELETE_COMPLETE", stack["stack_status_reason"]
    assert "DELETE projb on projb-vm1" not in marker.read_text()
    heat.delete("proja", "app", stacks["proja"])
    assert heat.settle("proja", "app", stacks["proja"])["stack_status"] == "DELETE_COMPLETE"
    assert marker.read_text().splitlines()[-1] == "DELETE bonjour on proja-vm1"


def test_projects_whose_ids_differ_only_in_case_and_punctuation_never_share_servers(world):
    """``projf`` and ``Proj-F``: one tenant if project ids were folded (lowercased,
    punctuation dropped), so one principal, one key and one namespace, and the second
    project's stack would enroll and deploy to the first's ``vm1``. Each is a tenant of its
    own: ``projf`` itself (as Keystone's ids are), ``Proj-F`` a readable prefix and a hash."""
    master, heat, root, directory = world
    marker = directory / "folded.log"
    params = {"marker": str(marker), "script": SCRIPT}
    tenants = {"projf": "projf",
               "Proj-F": "projf_" + hashlib.sha256(b"halite heat project\x00Proj-F").hexdigest()[:32]}
    stacks = {}
    # projf's vm1 first, enrolled and deployed to; then Proj-F's stack, the same template
    # naming the same server: folded, its enrollment would be refused (projf-vm1 has a key)
    # and its deployment would run on projf's server.
    for project, tenant in tenants.items():
        stacks[project] = heat.create(project, "app", SERVER_TEMPLATE, dict(params, greeting=project))
        boot_from_user_data(master, heat, project, "app", stacks[project], f"{project}-guest")
        stack = heat.settle(project, "app", stacks[project])
        assert stack["stack_status"] == "CREATE_COMPLETE", stack["stack_status_reason"]
        assert heat.output(stack, "result") == f"{project}, {tenant}-vm1"
    assert sorted(marker.read_text().splitlines()) == [
        f"CREATE Proj-F on {tenants['Proj-F']}-vm1", "CREATE projf on projf-vm1"]
    assert [k.state for k in root.keys("projf-vm1")] == ["accepted"]
    principals = {p.name: p for p in root.principals()}
    for tenant in tenants.values():
        assert principals[f"heat-{tenant}"].acl["tenant"] == tenant
    assert principals["heat-projf"].fingerprint != principals[f"heat-{tenants['Proj-F']}"].fingerprint
    # Through halite, Proj-F's principal sees and reaches nothing of projf's.
    f = halite.Client.connect([master.addr], principal=f"heat-{tenants['Proj-F']}",
                              key_file=str(directory / "tenant-keys" / f"heat-{tenants['Proj-F']}.key"),
                              master_key=master.master_key_hex)
    try:
        assert [d.server_id for d in f.list_deployments()] == [f"{tenants['Proj-F']}-vm1"]
        assert f.minions("projf-*") == []
        with pytest.raises(halite.HaliteError):
            f.run("projf-vm1", "deploy.apply")
    finally:
        f.close()

    # Each stack's delete runs DELETE on its own server alone.
    for project, tenant in tenants.items():
        heat.delete(project, "app", stacks[project])
        stack = heat.settle(project, "app", stacks[project])
        assert stack["stack_status"] == "DELETE_COMPLETE", stack["stack_status_reason"]
        assert marker.read_text().splitlines()[-1] == f"DELETE {project} on {tenant}-vm1"
    assert len(marker.read_text().splitlines()) == 4


def test_a_group_updates_in_place_and_only_a_server_taken_out_runs_delete(world):
    master, heat, root, directory = world
    marker = directory / "group.log"
    # Servers outside Nova, in project projc's namespace (literal_servers allows naming them).
    with connecting(root, ["projc-web1", "projc-web2", "projc-web3"]):
        for server in ("web1", "web2", "web3"):
            token = root.create_enrollment(f"projc-{server}", ttl=600, masters=[master.addr])
            guest = master.minion_dir(f"projc-{server}")
            guest.mkdir(parents=True, exist_ok=True)
            (guest / "enrollment.toml").write_text(token.enrollment)
            master.start_minion(f"projc-{server}", wait=False)
    params = {"marker": str(marker), "script": SCRIPT, "servers": {"a": "web1", "b": "web2"}}
    stack_id = heat.create("projc", "group", GROUP_TEMPLATE, params)
    stack = heat.settle("projc", "group", stack_id)
    assert stack["stack_status"] == "CREATE_COMPLETE", stack["stack_status_reason"]
    heat.update("projc", "group", stack_id, GROUP_TEMPLATE,
                dict(params, greeting="hey", servers={"a": "web1", "c": "web3"}))
    stack = heat.settle("projc", "group", stack_id)
    assert stack["stack_status"] == "UPDATE_COMPLETE", stack["stack_status_reason"]
    assert heat.output(stack, "results") == {"a": "hey, projc-web1", "c": "hey, projc-web3"}
    lines = marker.read_text().splitlines()
    assert sorted(lines[2:]) == ["CREATE hey on projc-web3", "DELETE hi on projc-web2", "UPDATE hey on projc-web1"]


def boot_guest(master, root, minion, documents):
    """Does what cloud-init does with the enrollment among ``documents`` (the #cloud-config
    ones a guest boots with), starts the guest's minion, and checks it enrolled."""
    enrollment = next(d for d in documents if d and "write_files" in d)["write_files"][0]
    assert enrollment["path"] == "/etc/halite/enrollment.toml"
    guest = master.minion_dir(minion)
    guest.mkdir(parents=True, exist_ok=True)
    (guest / "enrollment.toml").write_text(enrollment["content"])
    with connecting(root, [minion]):
        master.start_minion(minion, wait=False)
    assert [k.state for k in root.keys(minion)] == ["accepted"]


def test_enrollment_user_data_combines_with_heats_multipart_mime(world):
    """Heat's own MultipartMime takes the enrollment's user_data as a part beside others:
    what a server given ``{get_resource: mime}`` with ``user_data_format: SOFTWARE_CONFIG``
    boots with, and a guest booted from it enrolls."""
    master, heat, root, directory = world
    template = """
heat_template_version: 2018-08-31
resources:
  enroll:
    type: OS::Halite::EnrollmentUserData
    properties: {server_name: mime1}
  mime:
    type: OS::Heat::MultipartMime
    properties:
      parts:
        - config: {get_attr: [enroll, user_data]}
        - config: "#cloud-config\\npackages: [nginx]\\n"
outputs:
  user_data: {value: {get_attr: [mime, config]}}
"""
    stack_id = heat.create("projd", "mime", template)
    stack = heat.settle("projd", "mime", stack_id)
    assert stack["stack_status"] == "CREATE_COMPLETE", stack["stack_status_reason"]
    import email
    message = email.message_from_string(heat.output(stack, "user_data"))
    # Every part (cloud-init reads each #cloud-config one, whatever its MIME subtype).
    payloads = [part.get_payload(decode=True) for part in message.walk() if not part.is_multipart()]
    documents = [yaml.safe_load(p) for p in payloads if p and p.startswith(b"#cloud-config")]
    assert {"packages": ["nginx"]} in documents
    boot_guest(master, root, "projd-mime1", documents)


def test_enrollment_user_data_is_a_config_in_heats_store_for_software_config_servers(world):
    """``user_data: {get_resource: enroll}`` with ``user_data_format: SOFTWARE_CONFIG`` (or
    RAW): Heat's server loads the config by that id from its own store and wraps it in its
    multipart user_data (Heat's own ``build_userdata``); a guest booted from it enrolls. Deleting
    the stack removes the config and revokes the unused token."""
    master, heat, root, directory = world
    template = """
heat_template_version: 2018-08-31
resources:
  enroll:
    type: OS::Halite::EnrollmentUserData
    properties: {server_name: sc1}
  unused:
    type: OS::Halite::EnrollmentUserData
    properties: {server_name: sc2}
outputs:
  id: {value: {get_resource: enroll}}
  unused_id: {value: {get_resource: unused}}
"""
    stack_id = heat.create("proje", "swconfig", template)
    stack = heat.settle("proje", "swconfig", stack_id)
    assert stack["stack_status"] == "CREATE_COMPLETE", stack["stack_status_reason"]
    config_id = heat.output(stack, "id")
    stored = heat.call("proje", "GET", f"/software_configs/{config_id}")["software_config"]
    assert stored["config"].startswith("#cloud-config")
    # What OS::Nova::Server boots the guest with, by Heat's own code.
    from heat.engine.clients.os.nova import NovaClientPlugin
    import email
    plugin = object.__new__(NovaClientPlugin)
    user_data = plugin.build_userdata({}, stored["config"], instance_user=None, user_data_format="SOFTWARE_CONFIG")
    assert plugin.build_userdata({}, stored["config"], user_data_format="RAW") == stored["config"]
    # cloud-init takes a text/plain part by how it starts.
    payloads = [part.get_payload(decode=True) for part in email.message_from_string(user_data).walk()
                if part.get_content_type() == "text/plain"]
    documents = [yaml.safe_load(p) for p in payloads if p.startswith(b"#cloud-config")]
    boot_guest(master, root, "proje-sc1", documents)
    assert any(t.minion == "proje-sc2" and not t.used for t in root.enrollment_tokens())
    heat.delete("proje", "swconfig", stack_id)
    assert heat.settle("proje", "swconfig", stack_id)["stack_status"] == "DELETE_COMPLETE"
    for gone in (config_id, heat.output(stack, "unused_id")):
        with pytest.raises(AssertionError, match=" 404"):
            heat.call("proje", "GET", f"/software_configs/{gone}")
    assert not any(t.minion == "proje-sc2" for t in root.enrollment_tokens()), "the unused token is revoked"
