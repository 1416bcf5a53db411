"""Drives a halite gateway through a client generated from its own OpenAPI document
(openapi-python-client): a job to a minion, then a Heat-style config and deployment to it.

Usage: gateway_client.py PACKAGE_DIR BASE_URL TOKEN MINION
PACKAGE_DIR holds the generated package `halite_gateway`.
"""

import sys
import time

sys.path.insert(0, sys.argv[1])

from halite_gateway import AuthenticatedClient  # noqa: E402
from halite_gateway.api.default import (  # noqa: E402
    create_config,
    create_deployment,
    publish_job,
    show_deployment,
    show_job,
)
from halite_gateway.models import JobRequest, NewDeployment, NewSoftwareConfig  # noqa: E402


def answer(response):
    """The response as a dict, or exit naming what the gateway said."""
    if response is None or not hasattr(response, "to_dict"):
        sys.exit(f"no answer: {response!r}")
    body = response.to_dict()
    if "error" in body:
        sys.exit(f"gateway error: {body}")
    return body


def until(what, look, done, seconds=30):
    deadline = time.monotonic() + seconds
    while True:
        value = look()
        if done(value):
            return value
        if time.monotonic() > deadline:
            sys.exit(f"timed out waiting for {what}: {value}")
        time.sleep(0.1)


def main():
    base, token, minion = sys.argv[2], sys.argv[3], sys.argv[4]
    client = AuthenticatedClient(base_url=base, token=token)

    job = answer(publish_job.sync(client=client, body=JobRequest.from_dict({"target": minion, "function": "test.ping"})))
    jid = job["job"]["jid"]
    detail = until(
        "the job",
        lambda: answer(show_job.sync(jid, client=client))["job"],
        lambda d: all(m["state"] not in ("queued", "waiting", "sent", "running") for m in d["minions"]),
    )
    states = [(m["minion"], m["state"]) for m in detail["minions"]]
    assert states == [(minion, "returned")], states

    config = answer(
        create_config.sync(
            client=client,
            body=NewSoftwareConfig.from_dict(
                {
                    "name": "hello",
                    "group": "script",
                    "config": "#!/bin/sh\nprintf 'hi %s' \"$name\" > \"$heat_outputs_path.greeting\"\n",
                    "inputs": [{"name": "name"}],
                    "outputs": [{"name": "greeting"}],
                }
            ),
        )
    )["software_config"]
    deployment = answer(
        create_deployment.sync(
            client=client,
            body=NewDeployment.from_dict(
                {"config_id": config["id"], "server_id": minion, "input_values": {"name": "python"}}
            ),
        )
    )["software_deployment"]
    done = until(
        "the deployment",
        lambda: answer(show_deployment.sync(deployment["id"], client=client))["software_deployment"],
        lambda d: d["status"] != "IN_PROGRESS",
    )
    assert done["status"] == "COMPLETE", done
    assert done["output_values"]["greeting"] == "hi python", done
    print("ok", jid, deployment["id"])


main()
