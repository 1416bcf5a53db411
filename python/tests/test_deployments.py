"""Heat's model through the SDK: configs, deployments to servers not yet booted,
outputs and failures, updates, groups with a rollout."""

from __future__ import annotations

import halite

SCRIPT = """#!/bin/sh
echo "deploying $greeting to $deploy_server_id"
printf '%s' "$greeting, $name" > "$heat_outputs_path.result"
[ "$fail" = yes ] && { printf 'disk full' > "$heat_outputs_path.problem"; exit 3; }
exit 0
"""


def greet(client: halite.Client) -> halite.types.SoftwareConfig:
    return client.create_config(
        SCRIPT,
        group="script",
        inputs=[{"name": "greeting", "type": "String", "default": "hello"},
                {"name": "fail", "type": "String", "default": "no"}],
        outputs=[{"name": "result"}, {"name": "problem", "error_output": True}],
        name="greet",
    )


def test_a_deployment_made_before_its_server_boots_completes_with_outputs(master, root: halite.Client) -> None:
    config = greet(root)
    assert root.show_config(config.id) == config
    created = root.create_deployment(config.id, "vm1", {"name": "world"}, stack_id="stack/1",
                                     resource_name="greet_deployment")
    assert created.status == "IN_PROGRESS"
    metadata = root.server_configs("vm1")
    assert [item["id"] for item in metadata] == [created.derived_config_id]
    master.start_minion("vm1")
    done = root.wait_for_deployment(created.id, timeout=60)
    assert done.status == "COMPLETE", done
    assert done.output_values["result"] == "hello, world"
    assert done.output_values["deploy_stdout"] == "deploying hello to vm1\n"
    assert done.output_values["deploy_status_code"] == 0
    assert [d.id for d in root.list_deployments("vm1")] == [created.id]

    # An update pushes a new derived config; the deployment runs again.
    updated = root.update_deployment(created.id, input_values={"name": "again", "greeting": "hi"}, action="UPDATE")
    assert updated.action == "UPDATE"
    again = root.wait_for_deployment(created.id, timeout=60)
    assert again.status == "COMPLETE" and again.output_values["result"] == "hi, again"

    # A failing script: FAILED, with the script's own reason.
    failing = root.create_deployment(config.id, "vm1", {"name": "x", "fail": "yes"})
    failed = root.wait_for_deployment(failing.id, timeout=60)
    assert failed.status == "FAILED"
    assert "disk full" in failed.status_reason, failed.status_reason
    assert failed.output_values["deploy_status_code"] == 3

    root.delete_deployment(failing.id)
    try:
        root.show_deployment(failing.id)
    except halite.NotFound:
        pass
    else:
        raise AssertionError("a deleted deployment is still shown")


def test_waiting_runs_out_with_a_timeout_error(root: halite.Client) -> None:
    config = greet(root)
    pending = root.create_deployment(config.id, "never-booted")
    try:
        root.wait_for_deployment(pending.id, timeout=0.5)
    except halite.MasterTimeout as error:
        assert "IN_PROGRESS" in str(error)
    else:
        raise AssertionError("the wait did not time out")


def test_a_deployment_group_rolls_out_to_its_servers(master, root: halite.Client) -> None:
    config = greet(root)
    group = root.create_deployment_group(config.id, ["web1", "web2"], {"name": "group"}, batch=1)
    assert group.rollout.spec.batch == {"count": 1}
    done = root.wait_for_deployment_group(group.id, timeout=60)
    assert done.status == "COMPLETE", done
    assert sorted(m.server_id for m in done.members) == ["web1", "web2"]
    for member in done.members:
        assert member.deployment_id is not None
        deployment = root.show_deployment(member.deployment_id)
        assert deployment.output_values["result"] == "hello, group"
