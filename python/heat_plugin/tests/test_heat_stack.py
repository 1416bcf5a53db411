"""The halite resources inside a real Heat engine (openstack-heat 27.0.1 and its
own test framework): stacks created, updated and deleted against a real halite
master and real minions. Nova is faked the way Heat's own tests fake it; the fake
``servers.create`` boots a minion from the very user_data Heat passed it.

Run with a venv that has openstack-heat, Heat's test requirements and the halite
wheel (scripts/test.sh makes it)."""

import email
import hashlib
import hmac
import shutil
import sys
import tempfile
import types
from pathlib import Path
from unittest import mock

import yaml

# Heat's test framework first: it selects oslo.service's threading backend, which
# must happen before any other Heat module selects one.
from heat.tests import common  # noqa: I100
from oslo_config import cfg

from heat.common import template_format
from heat.engine import environment
from heat.engine import service_software_config
from heat.engine import stack as parser
from heat.engine import template as templatem
from heat.engine.clients.os import glance
from heat.engine.clients.os import nova
from heat.engine.resources.openstack.nova import server as nova_server
from heat.tests.openstack.nova import fakes as fakes_nova
from heat.rpc import client as rpc_client
from heat.tests import utils

import halite

HERE = Path(__file__).resolve().parent
PLUGIN_DIR = HERE.parent
sys.path.insert(0, str(PLUGIN_DIR.parent / "tests"))
from processes import Master  # noqa: E402
from waiting import connecting  # noqa: E402

SCRIPT = """#!/bin/sh
if [ "$deploy_action" = DELETE ]; then
  echo "DELETE on $deploy_server_id" >> "$marker"
  exit 0
fi
echo "deploying $greeting to $deploy_server_id"
printf '%s, %s' "$greeting" "$deploy_server_id" > "$heat_outputs_path.result"
[ "$fail" = yes ] && { printf 'disk full' > "$heat_outputs_path.problem"; exit 3; }
exit 0
"""

TEMPLATE = """
heat_template_version: 2018-08-31
parameters:
  server_name: {type: string}
  greeting: {type: string, default: hello}
  fail: {type: string, default: "no"}
  marker: {type: string}
  script: {type: string}
resources:
  enroll:
    type: OS::Halite::EnrollmentUserData
    properties:
      server_name: {get_param: server_name}
  server:
    type: OS::Nova::Server
    properties:
      name: {get_param: server_name}
      image: F17-x86_64-gold
      flavor: m1.small
      user_data_format: RAW
      user_data: {get_attr: [enroll, user_data]}
  config:
    type: OS::Halite::SoftwareConfig
    properties:
      group: script
      config: {get_param: script}
      inputs:
        - name: greeting
        - name: fail
        - name: marker
      outputs:
        - name: result
        - name: problem
          error_output: true
  deployment:
    type: OS::Halite::SoftwareDeployment
    properties:
      config: {get_resource: config}
      server: {get_resource: server}
      actions: [CREATE, UPDATE, DELETE]
      input_values:
        greeting: {get_param: greeting}
        fail: {get_param: fail}
        marker: {get_param: marker}
outputs:
  result:
    value: {get_attr: [deployment, result]}
  stdout:
    value: {get_attr: [deployment, deploy_stdout]}
  status_code:
    value: {get_attr: [deployment, deploy_status_code]}
"""

GROUP_TEMPLATE = """
heat_template_version: 2018-08-31
parameters:
  script: {type: string}
  marker: {type: string}
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
    properties:
      config: {get_resource: config}
      servers: {first: web1, second: web2}
      input_values: {greeting: hi, marker: {get_param: marker}}
      actions: [CREATE, DELETE]
      batch_size: "1"
      max_errors: "0"
outputs:
  results:
    value: {get_attr: [group, result]}
  codes:
    value: {get_attr: [group, deploy_status_codes]}
"""

cfg.CONF.import_opt("plugin_dirs", "heat.common.config")


def load_heat_with_the_plugin():
    """Heat's global environment, loaded once with the plugin found through
    plugin_dirs, plus the two mappings of Heat's default environment
    (/etc/heat/environment.d/default.yaml in an installed Heat, not in the PyPI
    wheel) that its test framework expects."""
    from heat.engine import resources

    if resources._environment is not None:
        return
    cfg.CONF.set_override("plugin_dirs", [str(PLUGIN_DIR)])
    resources.initialise()
    resources.global_env().registry.load({
        "AWS::RDS::DBInstance": "file:///etc/heat/templates/AWS_RDS_DBInstance.yaml",
        "AWS::CloudWatch::Alarm": "file:///etc/heat/templates/AWS_CloudWatch_Alarm.yaml",
    })


def output(stack, name):
    """A stack output's value, read as Heat's API reads it (heat.engine.service's
    show_output): the stack loaded from the database, the attributes the output
    references resolved from its resources."""
    loaded = parser.Stack.load(stack.context, stack_id=stack.id)
    loaded._update_all_resource_data(for_resources=False, for_outputs={name})
    return loaded.outputs[name].get_value()


def enrollment_written_by(user_data):
    """The enrollment file cloud-init writes from ``user_data``: a #cloud-config document,
    or (Heat's SOFTWARE_CONFIG format) a multipart message whose text/plain part cloud-init
    takes as #cloud-config by how it starts."""
    message = email.message_from_string(user_data)
    if message.is_multipart():
        documents = [part.get_payload(decode=True).decode() for part in message.walk()
                     if part.get_content_type() == "text/plain"]
    else:
        documents = [user_data]
    for document in documents:
        loaded = yaml.safe_load(document) if document.startswith("#cloud-config") else None
        if loaded and "write_files" in loaded:
            return loaded["write_files"][0]
    raise AssertionError(f"no enrollment in the user_data: {user_data[:300]!r}")


class HaliteStackTest(common.HeatTestCase):
    """One master per test; minions boot when Heat creates their servers."""

    def setUp(self):
        load_heat_with_the_plugin()
        super().setUp()
        self.dir = Path(tempfile.mkdtemp(prefix="halite-heat-"))
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.master = Master(self.dir)
        self.addCleanup(self.master.stop)
        self.root = self.master.root()
        self.addCleanup(self.root.close)
        self.marker = self.dir / "delete-marker"
        self._configure_heat_principal()
        self._fake_nova()
        self._engine_answers_software_configs()

    def _configure_heat_principal(self):
        """The principal Heat connects as, and its client config file, named in
        heat.conf's [halite] section."""
        key = self.dir / "heat.key"
        public = halite.generate_key(str(key))
        self.root.add_principal("heat", public, {
            "rules": [{"targets": "*", "functions": ["deploy.apply"]}],
            "events": ["halite/deployment/*", "halite/deployment_group/*"],
            "admin": True,
        })
        config = self.dir / "heat-client.toml"
        config.write_text(
            f'masters = ["{self.master.addr}"]\nmaster_key = "{self.master.master_key_hex}"\n'
            f'principal = "heat"\nkey_file = "{key}"\n'
        )
        cfg.CONF.set_override("client_config", str(config), group="halite")
        cfg.CONF.set_override("check_wait", 1.0, group="halite")

    def _engine_answers_software_configs(self):
        """The engine's RPC for software configs, answered in-process by the engine's own
        service (there is no message bus here): what OS::Halite::EnrollmentUserData stores,
        and OS::Nova::Server loads for a user_data given as a config's id."""
        service = service_software_config.SoftwareConfigService()

        def create(cnxt, group, name, config, inputs=None, outputs=None, options=None):
            return service.create_software_config(cnxt, group=group, name=name, config=config,
                                                  inputs=inputs or [], outputs=outputs or [],
                                                  options=options or {})

        self.patchobject(rpc_client.EngineClient, "create_software_config", side_effect=create)
        self.patchobject(rpc_client.EngineClient, "show_software_config",
                         side_effect=service.show_software_config)
        self.patchobject(rpc_client.EngineClient, "delete_software_config",
                         side_effect=service.delete_software_config)

    def _fake_nova(self):
        self.fc = fakes_nova.FakeClient()
        self.servers = {}
        self.booted_user_data = {}
        self.patchobject(nova.NovaClientPlugin, "client", return_value=self.fc)
        self.patchobject(nova.NovaClientPlugin, "find_flavor_by_name_or_id", return_value=2)
        self.patchobject(glance.GlanceClientPlugin, "find_image_by_name_or_id", return_value=2)
        self.patchobject(glance.GlanceClientPlugin, "get_image",
                         return_value=mock.Mock(min_ram=1, min_disk=1, status="ACTIVE"))
        self.patchobject(nova_server.Server, "store_external_ports")
        self.patchobject(self.fc.servers, "create", side_effect=self._boot)
        self.patchobject(self.fc.servers, "get", side_effect=self._get_server)
        self.patchobject(self.fc.servers, "delete", side_effect=self._delete_server)

    def _boot(self, name, image, flavor, **kwargs):
        """Nova's create: the guest boots, cloud-init writes the enrollment file from
        the user_data, and the minion starts with it."""
        user_data = kwargs["userdata"]
        self.booted_user_data[name] = user_data
        written = enrollment_written_by(user_data)
        assert written["path"] == "/etc/halite/enrollment.toml", written
        directory = self.master.minion_dir(name)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "enrollment.toml").write_text(written["content"])
        self.master.start_minion(name, wait=False)
        server = self.fc.servers.list()[1]
        server.name = name
        server.id = "nova-" + name
        server.status = "ACTIVE"
        self.servers[server.id] = server
        return server

    def _start_minions(self, *minions, **options):
        """Starts ``minions`` and returns once each is connected (its event on halite's bus)."""
        with connecting(self.root, minions):
            for minion in minions:
                self.master.start_minion(minion, wait=False, **options)

    def _get_server(self, server_id):
        server = self.servers.get(getattr(server_id, "id", server_id))
        if server is None:
            raise fakes_nova.fake_exception()
        return server

    def _delete_server(self, server_id):
        self.servers.pop(getattr(server_id, "id", server_id), None)

    def _stack(self, name, template, **params):
        stack = utils.parse_stack(template_format.parse(template), params=params, stack_name=name)
        stack.store()
        return stack

    def _params(self, server_name, **extra):
        params = {"server_name": server_name, "marker": str(self.marker), "script": SCRIPT}
        params.update(extra)
        return params

    def test_a_server_given_the_enrollment_as_a_software_config_enrolls_and_deploys(self):
        """``user_data: {get_resource: enroll}`` with ``user_data_format: SOFTWARE_CONFIG``:
        Heat's server loads the config from Heat's store and boots with its own multipart
        user_data around it."""
        self.stub_keystoneclient()
        template = TEMPLATE.replace(
            "user_data_format: RAW\n      user_data: {get_attr: [enroll, user_data]}",
            "user_data_format: SOFTWARE_CONFIG\n      software_config_transport: POLL_SERVER_HEAT\n"
            "      user_data: {get_resource: enroll}")
        self.assertNotEqual(TEMPLATE, template)
        stack = self._stack("swconfig", template, **self._params("vm-heat-sc"))
        stack.create()
        self.assertEqual((stack.CREATE, stack.COMPLETE), stack.state, stack.status_reason)
        self.assertTrue(email.message_from_string(self.booted_user_data["vm-heat-sc"]).is_multipart())
        self.assertEqual(["accepted"], [k.state for k in self.root.keys("vm-heat-sc")])
        self.assertEqual("hello, vm-heat-sc", output(stack, "result"))

    def test_a_stack_boots_a_server_that_enrolls_and_its_deployment_completes_with_outputs(self):
        stack = self._stack("enroll", TEMPLATE, **self._params("vm-heat-1"))
        stack.create()
        self.assertEqual((stack.CREATE, stack.COMPLETE), stack.state, stack.status_reason)

        # The server got exactly an enrollment user_data, and its minion enrolled with it.
        self.assertTrue(self.booted_user_data["vm-heat-1"].startswith("#cloud-config\n"))
        self.assertEqual(["accepted"], [k.state for k in self.root.keys("vm-heat-1")])
        grains = self.root.run("vm-heat-1", "grains.items")["vm-heat-1"].outputs
        self.assertEqual("vm-heat-", grains["role"])  # the grain its minion config sets

        self.assertEqual("hello, vm-heat-1", output(stack, "result"))
        self.assertEqual("deploying hello to vm-heat-1\n", output(stack, "stdout"))
        self.assertEqual(0, output(stack, "status_code"))
        deployment = stack["deployment"]
        done = self.root.show_deployment(deployment.resource_id)
        self.assertEqual(("COMPLETE", "vm-heat-1"), (done.status, done.server_id))
        # The guest saw Heat's own deployment inputs: the stack path, the resource name.
        derived = self.root.server_configs("vm-heat-1")[-1]
        inputs = {i["name"]: i.get("value") for i in derived["inputs"]}
        self.assertEqual(stack.identifier().stack_path(), inputs["deploy_stack_id"])
        self.assertEqual("deployment", inputs["deploy_resource_name"])

        # An update with a new greeting and a new script: the config is replaced, the
        # deployment runs UPDATE with it.
        new_params = self._params("vm-heat-1", greeting="bonjour",
                                  script=SCRIPT.replace("deploying", "updating"))
        updated = parser.Stack(stack.context, "enroll", templatem.Template(
            template_format.parse(TEMPLATE), env=environment.Environment(new_params)))
        old_config = stack["config"].resource_id
        stack.update(updated)
        self.assertEqual((stack.UPDATE, stack.COMPLETE), stack.state, stack.status_reason)
        self.assertNotEqual(old_config, stack["config"].resource_id)
        self.assertEqual("bonjour, vm-heat-1", output(stack, "result"))
        self.assertEqual("updating bonjour to vm-heat-1\n", output(stack, "stdout"))
        again = self.root.show_deployment(deployment.resource_id)
        self.assertEqual(("UPDATE", stack["config"].resource_id), (again.action, again.config_id))

        # Delete (of the stack as stored, as the API does it) runs the DELETE action
        # on the server, then removes everything.
        config_id = stack["config"].resource_id
        stack = parser.Stack.load(stack.context, stack_id=stack.id)
        stack.delete()
        self.assertEqual((stack.DELETE, stack.COMPLETE), stack.state, stack.status_reason)
        self.assertEqual("DELETE on vm-heat-1\n", self.marker.read_text())
        self.assertEqual([], self.root.list_deployments("vm-heat-1"))
        self.assertRaises(halite.NotFound, self.root.show_config, config_id)

    def test_a_failing_script_fails_the_stack_with_halites_reason(self):
        stack = self._stack("failing", TEMPLATE, **self._params("vm-heat-2", fail="yes"))
        stack.create()
        self.assertEqual((stack.CREATE, stack.FAILED), stack.state)
        self.assertIn("Deployment to server failed", stack.status_reason)
        self.assertIn("disk full", stack.status_reason)
        self.assertEqual((stack["deployment"].CREATE, stack["deployment"].FAILED), stack["deployment"].state)

    def test_an_unused_enrollment_token_is_revoked_with_its_stack(self):
        stack = self._stack("tokens", """
heat_template_version: 2018-08-31
resources:
  enroll:
    type: OS::Halite::EnrollmentUserData
    properties: {server_name: never-booted, ttl: 600}
outputs:
  user_data: {value: {get_attr: [enroll, user_data]}}
""")
        stack.create()
        self.assertEqual((stack.CREATE, stack.COMPLETE), stack.state, stack.status_reason)
        self.assertIn("id = \"never-booted\"", output(stack, "user_data"))
        self.assertEqual(["never-booted"], [t.minion for t in self.root.enrollment_tokens()])
        stack.delete()
        self.assertEqual((stack.DELETE, stack.COMPLETE), stack.state, stack.status_reason)
        self.assertEqual([], self.root.enrollment_tokens())

    def test_enrollment_user_data_never_takes_over_an_enrolled_minion(self):
        self._start_minions("vm-taken")
        stack = self._stack("taken", """
heat_template_version: 2018-08-31
resources:
  enroll:
    type: OS::Halite::EnrollmentUserData
    properties: {server_name: vm-taken, ttl: 600}
""")
        stack.create()
        self.assertEqual((stack.CREATE, stack.FAILED), stack.state)
        self.assertIn("already has an accepted key", stack.status_reason)
        self.assertEqual([], [t for t in self.root.enrollment_tokens() if not t.used])
        self.assertEqual(["accepted"], [k.state for k in self.root.keys("vm-taken")])

    def _override(self, name, value):
        cfg.CONF.set_override(name, value, group="halite")
        self.addCleanup(cfg.CONF.clear_override, name, group="halite")

    def _tenant_mode(self):
        """Each project acts through a tenant principal of its own."""
        secret = self.dir / "tenants.secret"
        secret.write_text("a-secret-of-more-than-32-bytes-for-heat")
        secret.chmod(0o600)
        self._override("tenant_secret_file", str(secret))
        self._override("tenant_key_dir", str(self.dir / "tenant-keys"))

    def _project_stack(self, project, name, template, **params):
        """A stack of Heat project ``project``."""
        context = utils.dummy_context(tenant_id=project)
        tmpl = templatem.Template(template_format.parse(template), env=environment.Environment(params))
        tmpl.store(context)
        stack = parser.Stack(context, name, tmpl)
        stack.store()
        return stack

    def test_each_project_deploys_through_its_own_tenant_and_never_reaches_anothers(self):
        self._tenant_mode()
        a = self._project_stack("proja", "a", TEMPLATE, **self._params("vm-a"))
        a.create()
        self.assertEqual((a.CREATE, a.COMPLETE), a.state, a.status_reason)
        # The server enrolled in project A's namespace, and its deployment ran there.
        self.assertEqual(["accepted"], [k.state for k in self.root.keys("proja-vm-a")])
        self.assertEqual("hello, proja-vm-a", output(a, "result"))
        self.assertEqual("proja-vm-a", self.root.show_deployment(a["deployment"].resource_id).server_id)
        principals = {p.name: p.acl for p in self.root.principals()}
        self.assertEqual("proja", principals["heat-proja"].get("tenant"))

        # Project B names A's minion directly: refused, nothing sent anywhere.
        b = self._project_stack("projb", "b", """
heat_template_version: 2018-08-31
parameters:
  script: {type: string}
resources:
  config:
    type: OS::Halite::SoftwareConfig
    properties: {group: script, config: {get_param: script}}
  steal:
    type: OS::Halite::SoftwareDeployment
    properties: {config: {get_resource: config}, server: proja-vm-a}
  enroll:
    type: OS::Halite::EnrollmentUserData
    properties: {server_name: vm-a}
""", script="#!/bin/sh\ntouch /tmp/stolen\n")
        b.create()
        self.assertEqual((b.CREATE, b.FAILED), b.state)
        self.assertIn("is not a Nova server of this project", b.status_reason)
        self.assertEqual(1, len(self.root.list_deployments("proja-vm-a")), "A's own deployment alone")
        # Its enrollment of the same name is in B's namespace: A's minion keeps its key.
        tokens = {t.minion for t in self.root.enrollment_tokens() if not t.used}
        self.assertNotIn("proja-vm-a", tokens)
        self.assertEqual(["accepted"], [k.state for k in self.root.keys("proja-vm-a")])

        # Allowed to name minions directly, B still reaches only its own namespace.
        self._override("literal_servers", ["*"])
        c = self._project_stack("projb", "c", """
heat_template_version: 2018-08-31
resources:
  enroll:
    type: OS::Halite::EnrollmentUserData
    properties: {server_name: proja-vm-a}
""")
        c.create()
        self.assertEqual((c.CREATE, c.COMPLETE), c.state, c.status_reason)
        self.assertEqual("projb-proja-vm-a", c["enroll"].data()["minion"], "in its own project's namespace")
        b_client = halite.Client.connect([self.master.addr], principal="heat-projb",
                                         key_file=str(self.dir / "tenant-keys" / "heat-projb.key"),
                                         master_key=self.master.master_key_hex)
        self.addCleanup(b_client.close)
        self.assertEqual([], b_client.minions("proja-*"))
        self.assertRaises(halite.HaliteError, b_client.run, "proja-vm-a", "deploy.apply")

    def test_projects_whose_ids_differ_only_in_case_or_punctuation_get_principals_and_keys_of_their_own(self):
        """``Proj-B`` and ``projb`` (and ``proj_b``): one tenant if project ids were folded
        (lowercased, punctuation dropped), so one principal and one derived key for both.
        Each gets a tenant, a principal and a key of its own, and its servers' ids are in
        its own namespace."""
        self._tenant_mode()
        tenants = {project: project if project == "projb" else "projb_" + hashlib.sha256(
            b"halite heat project\x00" + project.encode()).hexdigest()[:32]
            for project in ("projb", "Proj-B", "proj_b")}
        self.assertEqual(3, len(set(tenants.values())))
        stacks = {}
        for project in tenants:
            stack = stacks[project] = self._project_stack(project, "fold", """
heat_template_version: 2018-08-31
resources:
  enroll:
    type: OS::Halite::EnrollmentUserData
    properties: {server_name: vm1, ttl: 600}
""")
            stack.create()
            self.assertEqual((stack.CREATE, stack.COMPLETE), stack.state, stack.status_reason)
            self.assertEqual(tenants[project] + "-vm1", stack["enroll"].data()["minion"])
        principals = {p.name: p for p in self.root.principals()}
        secret = (self.dir / "tenants.secret").read_bytes().strip()
        publics = set()
        for tenant in tenants.values():
            principal = principals["heat-" + tenant]
            self.assertEqual(tenant, principal.acl.get("tenant"))
            self.assertFalse(principal.acl.get("admin"))
            # Its key is the one derived from the secret and its own tenant.
            public = halite.public_key(str(self.dir / "tenant-keys" / f"heat-{tenant}.key"))
            seed = hmac.new(secret, b"halite heat tenant " + tenant.encode(), hashlib.sha256).hexdigest()
            self.assertEqual(public, halite.generate_key(str(self.dir / f"derived-{tenant}.key"), seed=seed))
            publics.add(public)
        self.assertEqual(3, len(publics), "a key of its own for each project")
        self.assertEqual(3, len({principals["heat-" + t].fingerprint for t in tenants.values()}))
        self.assertEqual(sorted(t + "-vm1" for t in tenants.values()),
                         sorted(t.minion for t in self.root.enrollment_tokens()))
        # projb's server boots with its stack's enrollment; Proj-B's principal neither sees
        # nor reaches it.
        guest = self.master.minion_dir("projb-vm1")
        guest.mkdir(parents=True, exist_ok=True)
        (guest / "enrollment.toml").write_text(stacks["projb"]["enroll"].data()["enrollment"])
        self._start_minions("projb-vm1")
        self.assertEqual(["accepted"], [k.state for k in self.root.keys("projb-vm1")])
        b_client = halite.Client.connect([self.master.addr], principal="heat-" + tenants["Proj-B"],
                                         key_file=str(self.dir / "tenant-keys" / f"heat-{tenants['Proj-B']}.key"),
                                         master_key=self.master.master_key_hex)
        self.addCleanup(b_client.close)
        self.assertEqual([], b_client.minions("projb-*"))
        self.assertRaises(halite.HaliteError, b_client.run, "projb-vm1", "deploy.apply")

    def test_a_template_naming_each_signal_transport_runs_unchanged_and_its_outputs_come_back(self):
        """A template written for Heat's own deployments names its signal transport; mapped
        to halite's types, each runs as written and its outputs come back through halite."""
        self._override("literal_servers", ["web*"])
        self._start_minions("web1", "web2")
        transports = ["CFN_SIGNAL", "TEMP_URL_SIGNAL", "HEAT_SIGNAL", "ZAQAR_SIGNAL", "NO_SIGNAL"]
        deployments = "".join(f"""
  deploy_{t.lower()}:
    type: OS::Heat::SoftwareDeployment
    properties:
      config: {{get_resource: config}}
      server: web1
      signal_transport: {t}
      input_values: {{word: {t}}}
""" for t in transports)
        outputs = "".join(f"""
  {t.lower()}:
    value: {{get_attr: [deploy_{t.lower()}, result]}}
""" for t in transports)
        template = template_format.parse(f"""
heat_template_version: 2018-08-31
resources:
  config:
    type: OS::Heat::SoftwareConfig
    properties:
      group: script
      config: "#!/bin/sh\\nprintf 'got %s' $word > $heat_outputs_path.result\\n"
      inputs: [{{name: word}}]
      outputs: [{{name: result}}]
{deployments}
  group:
    type: OS::Heat::SoftwareDeploymentGroup
    properties:
      config: {{get_resource: config}}
      servers: {{one: web2}}
      signal_transport: TEMP_URL_SIGNAL
      name: grouped
      input_values: {{word: group}}
outputs:
{outputs}
  group:
    value: {{get_attr: [group, result]}}
""")
        env = environment.Environment({
            "resource_registry": {
                "OS::Heat::SoftwareConfig": "OS::Halite::SoftwareConfig",
                "OS::Heat::SoftwareDeployment": "OS::Halite::SoftwareDeployment",
                "OS::Heat::SoftwareDeploymentGroup": "OS::Halite::SoftwareDeploymentGroup",
            },
        })
        context = utils.dummy_context()
        tmpl = templatem.Template(template, env=env)
        tmpl.store(context)
        stack = parser.Stack(context, "transports", tmpl)
        stack.store()
        stack.validate()
        stack.create()
        self.assertEqual((stack.CREATE, stack.COMPLETE), stack.state, stack.status_reason)
        for t in transports:
            self.assertEqual(f"got {t}", output(stack, t.lower()), t)
        self.assertEqual({"one": "got group"}, output(stack, "group"))
        stack = parser.Stack.load(stack.context, stack_id=stack.id)
        stack.delete()
        self.assertEqual((stack.DELETE, stack.COMPLETE), stack.state, stack.status_reason)

    def test_a_minion_that_is_another_servers_guest_is_refused(self):
        """A minion says (cloud-init's instance-id, as its cloud_instance_id grain) which
        Nova server it is the guest of: a server whose name is that minion's, but which is
        another server, gets nothing deployed to the wrong guest."""
        self._start_minions("vm-dup", grains='cloud_instance_id = "6a1c1a9e-0f8e-4a39-9d43-0c3f4b6a8e11"\n')
        self.servers["nova-vm-dup"] = types.SimpleNamespace(name="vm-dup", id="nova-vm-dup", status="ACTIVE")
        stack = self._stack("dup", """
heat_template_version: 2018-08-31
resources:
  config:
    type: OS::Halite::SoftwareConfig
    properties: {group: script, config: "#!/bin/sh\\ntrue\\n"}
  deployment:
    type: OS::Halite::SoftwareDeployment
    properties: {config: {get_resource: config}, server: nova-vm-dup}
""")
        stack.create()
        self.assertEqual((stack.CREATE, stack.FAILED), stack.state)
        self.assertIn("is the guest of Nova server 6a1c1a9e-0f8e-4a39-9d43-0c3f4b6a8e11, not of nova-vm-dup",
                      stack.status_reason)
        self.assertEqual([], self.root.list_deployments("vm-dup"), "nothing deployed")

    def test_deleting_a_stack_whose_server_is_gone_finishes_at_once(self):
        stack = self._stack("gone", TEMPLATE, **self._params("vm-gone"))
        stack.create()
        self.assertEqual((stack.CREATE, stack.COMPLETE), stack.state, stack.status_reason)
        # The server disappears behind Heat's back (deleted in Nova).
        self.servers.clear()
        stack = parser.Stack.load(stack.context, stack_id=stack.id)
        stack.delete()
        self.assertEqual((stack.DELETE, stack.COMPLETE), stack.state, stack.status_reason)
        self.assertFalse(self.marker.exists(), "no DELETE ran on a server that is gone")

    def test_a_deployment_group_rolls_out_to_every_server(self):
        self._override("literal_servers", ["web*"])
        self._start_minions("web1", "web2")
        stack = self._stack("group", GROUP_TEMPLATE, script=SCRIPT, marker=str(self.marker))
        stack.create()
        self.assertEqual((stack.CREATE, stack.COMPLETE), stack.state, stack.status_reason)
        self.assertEqual({"first": "hi, web1", "second": "hi, web2"}, output(stack, "results"))
        self.assertEqual({"first": 0, "second": 0}, output(stack, "codes"))
        group = self.root.show_deployment_group(stack["group"].resource_id)
        self.assertEqual({"count": 1}, group.rollout.spec.batch)
        stack.delete()
        self.assertEqual((stack.DELETE, stack.COMPLETE), stack.state, stack.status_reason)
        self.assertEqual(["DELETE on web1", "DELETE on web2"], sorted(self.marker.read_text().splitlines()))
        self.assertEqual([], self.root.list_deployments())

    def test_a_group_update_is_made_in_place_and_only_servers_taken_out_run_delete(self):
        self._override("literal_servers", ["web*"])
        self._start_minions("web1", "web2", "web3")
        template = GROUP_TEMPLATE.replace(
            "  marker: {type: string}",
            "  marker: {type: string}\n  greeting: {type: string, default: hi}\n"
            "  servers: {type: json, default: {first: web1, second: web2}}").replace(
            "servers: {first: web1, second: web2}", "servers: {get_param: servers}").replace(
            "input_values: {greeting: hi,", "input_values: {greeting: {get_param: greeting},").replace(
            "actions: [CREATE, DELETE]", "actions: [CREATE, UPDATE, DELETE]")
        template = template.replace("resources:\n  config:", "resources:\n  config:", 1)
        template += "\n"
        template = template.replace("  group:\n    type: OS::Halite::SoftwareDeploymentGroup",
                                    "  group:\n    type: OS::Halite::SoftwareDeploymentGroup\n"
                                    "    update_policy: {rolling_update: {max_batch_size: 1, pause_time: 0}}")
        stack = self._stack("inplace", template, script=SCRIPT, marker=str(self.marker))
        stack.create()
        self.assertEqual((stack.CREATE, stack.COMPLETE), stack.state, stack.status_reason)
        group_id = stack["group"].resource_id
        before = {m.server_id: m.deployment_id for m in self.root.show_deployment_group(group_id).members}

        params = {"script": SCRIPT, "marker": str(self.marker), "greeting": "bonjour",
                  "servers": {"first": "web1", "third": "web3"}}
        updated = parser.Stack(stack.context, "inplace", templatem.Template(
            template_format.parse(template), env=environment.Environment(params)))
        stack.update(updated)
        self.assertEqual((stack.UPDATE, stack.COMPLETE), stack.state, stack.status_reason)
        # The same group, changed in place: web1 ran UPDATE on its own deployment, web3 was
        # added with CREATE, and web2 alone ran DELETE.
        self.assertEqual(group_id, stack["group"].resource_id)
        group = self.root.show_deployment_group(group_id)
        after = {m.server_id: m.deployment_id for m in group.members}
        self.assertEqual(["web1", "web3"], sorted(after))
        self.assertEqual(before["web1"], after["web1"])
        self.assertEqual("UPDATE", self.root.show_deployment(after["web1"]).action)
        self.assertEqual("CREATE", self.root.show_deployment(after["web3"]).action)
        self.assertEqual({"count": 1}, group.rollout.spec.batch)
        self.assertEqual(["DELETE on web2"], self.marker.read_text().splitlines())
        self.assertEqual({"first": "bonjour, web1", "third": "bonjour, web3"}, output(stack, "results"))
        self.assertRaises(halite.NotFound, self.root.show_deployment, before["web2"])

    def test_structured_configs_and_components_work_through_the_environments_mapping(self):
        """Templates written for Heat's own StructuredConfig, StructuredDeployment and
        SoftwareComponent, mapped to halite's types by the environment."""
        self._override("literal_servers", ["web*"])
        self._start_minions("web5")
        # A hook of the image's (as heat-agents installs them): writes what it was given.
        hooks = self.master.minion_dir("web5") / "heat" / "hooks"
        hooks.mkdir(parents=True, exist_ok=True)
        received = self.dir / "received.json"
        hook = hooks / "json-file"
        hook.write_text(f"#!/bin/sh\ncat > {received}\necho '{{}}'\n")
        hook.chmod(0o755)
        template = template_format.parse("""
heat_template_version: 2018-08-31
parameters:
  marker: {type: string}
resources:
  structured:
    type: OS::Heat::StructuredConfig
    properties:
      group: json-file
      config:
        settings: {port: {get_input: port}, action: {get_input: deploy_action}}
  deploy_structured:
    type: OS::Heat::StructuredDeployment
    properties: {config: {get_resource: structured}, server: web5, input_values: {port: 8080}}
  component:
    type: OS::Heat::SoftwareComponent
    properties:
      configs:
        - {actions: [CREATE], tool: script, config: "#!/bin/sh\\necho created > $marker"}
        - {actions: [DELETE], tool: script, config: "#!/bin/sh\\necho deleted > $marker"}
      inputs: [{name: marker}]
  deploy_component:
    type: OS::Heat::SoftwareDeployment
    depends_on: deploy_structured
    properties:
      config: {get_resource: component}
      server: web5
      input_values: {marker: {get_param: marker}}
""")
        env = environment.Environment({
            "parameters": {"marker": str(self.marker)},
            "resource_registry": {
                "OS::Heat::StructuredConfig": "OS::Halite::SoftwareConfig",
                "OS::Heat::SoftwareComponent": "OS::Halite::SoftwareConfig",
                "OS::Heat::StructuredDeployment": "OS::Halite::SoftwareDeployment",
                "OS::Heat::SoftwareDeployment": "OS::Halite::SoftwareDeployment",
            },
        })
        context = utils.dummy_context()
        tmpl = templatem.Template(template, env=env)
        tmpl.store(context)
        stack = parser.Stack(context, "structured", tmpl)
        stack.store()
        stack.create()
        self.assertEqual((stack.CREATE, stack.COMPLETE), stack.state, stack.status_reason)
        import json
        item = json.loads(received.read_text())
        self.assertEqual({"settings": {"port": 8080, "action": "CREATE"}}, item["config"])
        self.assertEqual("created\n", self.marker.read_text())
        stack = parser.Stack.load(stack.context, stack_id=stack.id)
        stack.delete()
        self.assertEqual((stack.DELETE, stack.COMPLETE), stack.state, stack.status_reason)
        self.assertEqual("deleted\n", self.marker.read_text())
