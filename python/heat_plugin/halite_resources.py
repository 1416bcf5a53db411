#
#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
"""Heat resources backed by a halite master.

Put this file in a directory named in ``plugin_dirs`` of ``heat.conf``, install
the ``halite`` Python package in Heat's environment, and tell Heat how to reach
the master::

    [halite]
    client_config = /etc/heat/halite-client.toml   # or $HALITE_CLIENT_CONFIG
    tenant_secret_file = /etc/heat/halite-tenants.secret

With ``tenant_secret_file`` (the secure setup, and the one for a cloud), every Heat
project acts through a halite tenant principal of its own, ``heat-<tenant>``,
confined by the master to the minions named ``<tenant>-*``: a template of one
project can neither reach, enroll as, nor read anything of another project's
servers. The tenant is the project id itself for Keystone's ids (32 lowercase hex
digits), else a readable prefix and a hash of the id (``_tenant_of``): one tenant
per project, never shared. The plugin registers each project's principal on first
use, through the administrator principal of ``client_config``; its key is derived
from the secret and the tenant (HMAC-SHA256), so every Heat host derives the same
key and no key file is copied between them. Without it, every stack acts as the
``client_config`` principal itself (one project, or a trusted set of them).

The resources:

``OS::Halite::SoftwareConfig``
    ``OS::Heat::SoftwareConfig``'s properties, stored in halite.
``OS::Halite::SoftwareDeployment``
    ``OS::Heat::SoftwareDeployment``'s properties (``config``, ``server``,
    ``input_values``, ``actions``, ``name``); halite pushes the config to the
    server's minion and pushes its outputs back, and the resource completes
    when halite says ``COMPLETE`` or fails with halite's reason. ``server`` is
    a Nova server of the stack's project: its minion is named like it (prefixed
    with the project's tenant in tenant mode). A value that is not such a server is refused,
    unless ``[halite] literal_servers`` allows naming that minion directly.
``OS::Halite::SoftwareDeploymentGroup``
    The same for a map of servers, rolled out with halite's options
    (``batch_size``, ``batch_wait``, ``max_errors``, ``canary``, ``abort_on``).
``OS::Halite::EnrollmentUserData``
    A one-time enrollment token bound to a server's name (in the stack's project's
    namespace in tenant mode), as cloud-init ``user_data`` and, like Heat's
    ``OS::Heat::CloudConfig``, a config in Heat's store: ``OS::Nova::Server`` takes
    ``{get_resource: ...}`` with ``user_data_format: SOFTWARE_CONFIG`` or ``RAW``.

``signal_transport`` takes every value Heat's own resources take (``CFN_SIGNAL``,
``TEMP_URL_SIGNAL``, ``HEAT_SIGNAL``, ``ZAQAR_SIGNAL``, ``NO_SIGNAL``), so a template
written for them runs unchanged; whichever it names, the outputs come back through halite,
which pushes them to the master itself.
"""

import fnmatch
import hashlib
import hmac
import os
import re
import tomllib

from oslo_config import cfg
from oslo_log import log as logging
from oslo_utils import uuidutils

from heat.common import exception
from heat.common.i18n import _
from heat.rpc import api as rpc_api
from heat.engine import attributes
from heat.engine import constraints
from heat.engine import properties
from heat.engine import resource
from heat.engine.resources.openstack.heat import software_config
from heat.engine.resources.openstack.heat import software_deployment
from heat.engine import support

try:
    import halite
except ImportError:  # the resources are then unavailable, and Heat says so
    halite = None

LOG = logging.getLogger(__name__)

HALITE_OPTS = [
    cfg.StrOpt('client_config',
               help=_('halite client config file (TOML: masters, master_key, '
                      'principal, key_file); default $HALITE_CLIENT_CONFIG.')),
    cfg.FloatOpt('check_wait', default=2.0, min=0.1,
                 help=_('Seconds each completion check waits for halite to '
                        'push a deployment\'s state before handing back to '
                        'the engine.')),
    cfg.ListOpt('enrollment_masters', default=[],
                help=_('Master addresses written into enrollment user_data '
                       '(the ones guests reach); default: the master Heat '
                       'is connected to.')),
    cfg.StrOpt('tenant_secret_file',
               help=_('A secret (at least 32 bytes, readable by Heat alone): '
                      'each project then acts through a tenant principal of '
                      'its own, whose key is derived from it.')),
    cfg.StrOpt('tenant_key_dir', default='/var/lib/heat/halite-tenants',
               help=_('Where the derived tenant keys are written (mode 0600).')),
    cfg.ListOpt('literal_servers', default=[],
                help=_('Globs of minion ids a template may name as its server '
                       'without a Nova server of its project (in tenant mode, '
                       'within the project\'s namespace still); default: none.')),
]
cfg.CONF.register_opts(HALITE_OPTS, group='halite')

_CLIENT = {}


def halite_client():
    """The process's halite client, connected on first use (after Heat forked its
    workers) and again when the configured client file changes."""
    path = cfg.CONF.halite.client_config or os.environ.get('HALITE_CLIENT_CONFIG')
    if not path:
        raise exception.Error(_('halite: set [halite] client_config in heat.conf '
                                'or HALITE_CLIENT_CONFIG'))
    key = (os.getpid(), path)
    client = _CLIENT.get(key)
    if client is None:
        for stale in _CLIENT.values():
            stale.close()
        _CLIENT.clear()
        client = _blocking(halite.Client.from_config, path)
        _CLIENT[key] = client
    return client


_PLAIN_PROJECT = re.compile(r'[a-z0-9]{1,32}')
_PROJECT_HASH = b'halite heat project\x00'


def _tenant_of(context):
    """The halite tenant of a stack's project: the prefix of its minions' ids, the
    name in its principal (``heat-<tenant>``) and in its derived key.

    - A project id of 1 to 32 of ``[a-z0-9]`` (Keystone's ids, ``uuid4().hex``, and
      plain lowercase names) is its own tenant, unchanged.
    - Any other id is ``<readable>_<hash>``: ``readable`` its first 16 of ``[a-z0-9]``
      once lowercased (``p`` if none), ``hash`` the first 32 hex digits of
      SHA-256(``halite heat project\\0`` + the id in UTF-8).

    Why: the mapping must be injective, or one project acts as another. Folding ids
    (lowercase, punctuation dropped) would give ``Proj-B``, ``proj_b`` and ``projb``
    one tenant, one principal, one key and one namespace, so a stack of one could
    enroll and deploy into another's servers. The first form maps to itself, and the
    second holds ``_``, which the first never does, and a hash of the whole id: no
    two ids share a tenant (short of a 128-bit SHA-256 collision). It depends on the
    id alone, so every Heat host, every restart and every upgrade derives the same
    tenant (a tenant the plugin registered before this rule, from an id of the first
    form, keeps its name, principal and key). It has no ``-``: a tenant holds every
    minion id ``<tenant>-...``, and the master refuses tenant names with ``-`` so that
    no id lies in two tenants' namespaces. It is 1 to 49 bytes of ``[a-z0-9_]``
    starting with a letter or digit: a valid halite id and tenant name."""
    project = getattr(context, 'project_id', None) or getattr(context, 'tenant_id', None)
    if not project:
        raise exception.Error(_('halite: the stack has no project to act for'))
    project = str(project)
    if _PLAIN_PROJECT.fullmatch(project):
        return project
    readable = re.sub('[^a-z0-9]', '', project.lower())[:16] or 'p'
    # surrogatepass: the same bytes as UTF-8 for every valid string, and no error (an
    # injective encoding still) for a lone surrogate.
    digest = hashlib.sha256(_PROJECT_HASH + project.encode('utf-8', 'surrogatepass')).hexdigest()
    return '%s_%s' % (readable, digest[:32])


def _tenant_principal(tenant):
    return 'heat-' + tenant


def client_for(res):
    """The halite client a resource acts through: its project's tenant principal
    with ``tenant_secret_file``, else the ``client_config`` principal."""
    secret_file = cfg.CONF.halite.tenant_secret_file
    if not secret_file:
        return halite_client()
    tenant = _tenant_of(res.context)
    key = (os.getpid(), 'tenant', tenant)
    client = _CLIENT.get(key)
    if client is None:
        client = _blocking(_connect_tenant, tenant, secret_file)
        _CLIENT[key] = client
    return client


def _connect_tenant(tenant, secret_file):
    """Connects as ``tenant``'s principal, registering it first if the master does
    not know it (through the administrator principal of ``client_config``)."""
    secret = open(secret_file, 'rb').read().strip()
    if len(secret) < 32:
        raise exception.Error(_('halite: %s holds fewer than 32 bytes') % secret_file)
    principal = _tenant_principal(tenant)
    seed = hmac.new(secret, b'halite heat tenant ' + tenant.encode(), hashlib.sha256).hexdigest()
    key_dir = cfg.CONF.halite.tenant_key_dir
    os.makedirs(key_dir, mode=0o700, exist_ok=True)
    key_file = os.path.join(key_dir, principal + '.key')
    try:
        public = halite.generate_key(key_file, seed=seed)
    except FileExistsError:
        public = halite.public_key(key_file)
    admin = halite_client()
    if principal not in {p.name for p in admin.principals()}:
        admin.add_principal(principal, public, {
            'tenant': tenant,
            'rules': [{'targets': '*', 'functions': ['deploy.apply']}],
            'events': ['halite/deployment/*', 'halite/deployment_group/*'],
        })
        LOG.info('halite: registered tenant principal %s', principal)
    path = cfg.CONF.halite.client_config or os.environ.get('HALITE_CLIENT_CONFIG')
    with open(path, 'rb') as file:
        settings = tomllib.load(file)
    return halite.Client.connect(settings['masters'], principal=principal, key_file=key_file,
                                 master_key=settings['master_key'])


def _in_namespace(res, name):
    """A minion id as the stack's project names it: prefixed with the project's
    tenant (``_tenant_of``) in tenant mode."""
    if not cfg.CONF.halite.tenant_secret_file:
        return name
    return '%s-%s' % (_tenant_of(res.context), name)


def _blocking(function, *args, **kwargs):
    """Calls the SDK. Under eventlet (a real Heat engine) the call runs in a native
    thread, so one wait does not stop every other green thread; the SDK releases
    the GIL while it waits."""
    try:
        from eventlet import patcher
        from eventlet import tpool
    except ImportError:
        patcher = None
    if patcher is not None and patcher.is_monkey_patched('thread'):
        return tpool.execute(function, *args, **kwargs)
    return function(*args, **kwargs)


def _call(res, method, *args, **kwargs):
    """A call on the client ``res`` acts through; halite's errors become Heat's,
    except ``NotFound`` and ``MasterTimeout`` (a wait that ran out), which callers
    handle."""
    try:
        return _blocking(getattr(client_for(res), method), *args, **kwargs)
    except (halite.NotFound, halite.MasterTimeout):
        raise  # the callers handle these
    except halite.HaliteError as error:
        raise exception.Error(_('halite: %s') % error)


def _minion_of(res, server):
    """The minion id of ``server``: the name of a Nova server of the stack's project
    (in its namespace), or, where ``[halite] literal_servers`` allows it, the value
    itself as a minion id. Anything else is refused: never a guess."""
    try:
        # Nova answers for the stack's own project only.
        nova_server = res.client_plugin('nova').get_server(server)
    except Exception as error:  # not a server of this project, or no Nova at all
        allowed = cfg.CONF.halite.literal_servers
        if not any(fnmatch.fnmatchcase(server, glob) for glob in allowed):
            raise exception.Error(
                _('halite: %(server)s is not a Nova server of this project (%(error)s), and '
                  '[halite] literal_servers does not allow naming a minion directly')
                % {'server': server, 'error': error})
        return _in_namespace(res, server)
    minion = _in_namespace(res, nova_server.name)
    _check_guest_of(res, minion, nova_server)
    return minion


def _check_guest_of(res, minion, nova_server):
    """Refuses ``minion`` when it says (its ``cloud_instance_id`` grain, cloud-init's
    instance-id) it is the guest of another Nova server than ``nova_server``: a name
    reused after its server was replaced, or two servers of the project named alike."""
    for info in _call(res, 'minions', minion):
        instance = (info.grains or {}).get('cloud_instance_id')
        if (info.id == minion and isinstance(instance, str) and uuidutils.is_uuid_like(instance)
                and instance.lower() != str(nova_server.id).lower()):
            raise exception.Error(
                _('halite: minion %(minion)s is the guest of Nova server %(instance)s, not of '
                  '%(server)s (%(name)s): give each server a name of its own, and its '
                  'OS::Halite::EnrollmentUserData that server_name')
                % {'minion': minion, 'instance': instance, 'server': nova_server.id,
                   'name': nova_server.name})


def _server_gone(res, server):
    """Whether ``server`` names a Nova server that no longer exists (deleted with
    its stack, or by hand): its DELETE is then skipped, as Heat's own resource
    does."""
    try:
        res.client_plugin('nova').get_server(server)
        return False
    except exception.EntityNotFound:
        return True
    except Exception:  # no Nova: a literal minion, judged by the master
        return False


def _inputs(values):
    keep = ('name', 'description', 'type', 'default', 'replace_on_change')
    return [{k: v for k, v in dict(i).items() if k in keep and v is not None} for i in values or []]


def _outputs(values):
    keep = ('name', 'description', 'type', 'error_output')
    return [{k: v for k, v in dict(o).items() if k in keep and v is not None} for o in values or []]


def _settled(deployment_or_group):
    """True once COMPLETE; Heat's own error (with halite's reason) once FAILED."""
    if deployment_or_group.status == 'COMPLETE':
        return True
    if deployment_or_group.status == 'FAILED':
        message = _('Deployment to server failed: %s') % deployment_or_group.status_reason
        LOG.info(message)
        raise exception.Error(message)
    return False


class HaliteSoftwareConfig(software_config.SoftwareConfig):
    """``OS::Heat::SoftwareConfig``, stored in halite; also ``OS::Heat::StructuredConfig``
    (a map ``config``, whose ``get_input`` calls each deployment fills in) and
    ``OS::Heat::SoftwareComponent`` (``configs``: one config per action)."""

    support_status = support.SupportStatus(version='27.0.0')
    default_client_name = None
    entity = None

    COMPONENT_CONFIGS = 'configs'
    COMPONENT_KEYS = (COMPONENT_CONFIG, COMPONENT_ACTIONS, COMPONENT_TOOL) = ('config', 'actions', 'tool')

    properties_schema = dict(software_config.SoftwareConfig.properties_schema)
    properties_schema[software_config.SoftwareConfig.CONFIG] = properties.Schema(
        properties.Schema.ANY,
        _('The config: a script or document (a string), or a structured config (a map '
          'whose get_input calls each deployment fills in).'))
    properties_schema[COMPONENT_CONFIGS] = properties.Schema(
        properties.Schema.LIST,
        _('OS::Heat::SoftwareComponent\'s configs: one per set of actions, each with the '
          'config and the tool (hook group) that applies it.'),
        schema=properties.Schema(properties.Schema.MAP, schema={
            COMPONENT_CONFIG: properties.Schema(properties.Schema.STRING, required=True),
            COMPONENT_ACTIONS: properties.Schema(properties.Schema.LIST, default=['CREATE', 'UPDATE']),
            COMPONENT_TOOL: properties.Schema(properties.Schema.STRING, required=True),
        }))

    def _config(self):
        """What is stored: the config itself, or a component's configs as Heat's
        SoftwareComponent stores them (group ``component``)."""
        components = self.properties[self.COMPONENT_CONFIGS]
        if components:
            return {'configs': [dict(c) for c in components]}
        config = self.properties[self.CONFIG]
        return '' if config is None else config

    def validate(self):
        super().validate()
        if self.properties[self.COMPONENT_CONFIGS] and self.properties[self.CONFIG]:
            raise exception.StackValidationFailed(message=_(
                'give either config or configs (a SoftwareComponent), not both'))

    def handle_create(self):
        group = self.properties[self.GROUP]
        if self.properties[self.COMPONENT_CONFIGS]:
            group = 'component'
        config = _call(self, 'create_config',
                       self._config(),
                       group=group,
                       inputs=_inputs(self.properties[self.INPUTS]),
                       outputs=_outputs(self.properties[self.OUTPUTS]),
                       options=self.properties[self.OPTIONS],
                       name=self.physical_resource_name())
        self.resource_id_set(config.id)

    def handle_delete(self):
        if self.resource_id is None:
            return
        try:
            _call(self, 'delete_config', self.resource_id)
        except halite.NotFound:
            pass

    def _resolve_attribute(self, name):
        if name == self.CONFIG_ATTR and self.resource_id:
            try:
                return _call(self, 'show_config', self.resource_id).config
            except halite.NotFound:
                return ''

    def _show_resource(self):
        return _call(self, 'show_config', self.resource_id).to_dict()


_DEPLOYMENT = software_deployment.SoftwareDeployment


class HaliteSoftwareDeployment(resource.Resource):
    """``OS::Heat::SoftwareDeployment``, carried out by halite: the master pushes
    the config to the server's minion, the minion pushes its outputs back."""

    support_status = support.SupportStatus(version='27.0.0')

    PROPERTIES = (CONFIG, SERVER, INPUT_VALUES, DEPLOY_ACTIONS, NAME, SIGNAL_TRANSPORT,
                  INPUT_KEY, INPUT_VALUES_VALIDATE) = (
        _DEPLOYMENT.CONFIG, _DEPLOYMENT.SERVER, _DEPLOYMENT.INPUT_VALUES,
        _DEPLOYMENT.DEPLOY_ACTIONS, _DEPLOYMENT.NAME, _DEPLOYMENT.SIGNAL_TRANSPORT,
        'input_key', 'input_values_validate')

    # The same properties as OS::Heat::SoftwareDeployment and StructuredDeployment, with
    # Heat's own schemas; signal_transport is taken and ignored (halite pushes the outputs
    # back itself, whichever transport a template names).
    properties_schema = {name: _DEPLOYMENT.properties_schema[name] for name in PROPERTIES[:6]}
    properties_schema[INPUT_KEY] = properties.Schema(
        properties.Schema.STRING,
        _('For a structured config: the name of the function whose calls are replaced by '
          'input values.'), default='get_input')
    properties_schema[INPUT_VALUES_VALIDATE] = properties.Schema(
        properties.Schema.STRING,
        _('For a structured config: LAX (a missing input becomes null) or STRICT (refused).'),
        default='LAX', constraints=[constraints.AllowedValues(['LAX', 'STRICT'])])

    ATTRIBUTES = (STDOUT, STDERR, STATUS_CODE) = _DEPLOYMENT.ATTRIBUTES

    attributes_schema = dict(_DEPLOYMENT.attributes_schema)

    def _minion(self):
        minion = self.data().get('minion')
        if minion is None:
            minion = _minion_of(self, self.properties[self.SERVER])
            self.data_set('minion', minion)
        return minion

    def _runs(self, action, config):
        """Whether ``action`` runs on the server: for a component (Heat's
        SoftwareComponent), when one of its configs lists it; else when ``actions``
        does."""
        if config is not None and config.group == 'component' and isinstance(config.config, dict):
            return any(action in (c.get('actions') or []) for c in config.config.get('configs', []))
        return action in self.properties[self.DEPLOY_ACTIONS]

    def _handle_action(self, action):
        config_id = self.properties[self.CONFIG]
        try:
            config = _call(self, 'show_config', config_id) if config_id else None
        except halite.NotFound:
            if self.resource_id is not None and action == self.DELETE:
                return None
            raise exception.Error(_('halite has no software config %s: make it an '
                                    'OS::Halite::SoftwareConfig') % config_id)
        if not self._runs(action, config):
            return None
        if self.resource_id is None:
            deployment = _call(self, 'create_deployment',
                               config_id,
                               self._minion(),
                               input_values=self.properties[self.INPUT_VALUES] or {},
                               action=action,
                               input_key=self.properties[self.INPUT_KEY],
                               input_values_validation=self.properties[self.INPUT_VALUES_VALIDATE],
                               stack_id=self.stack.identifier().stack_path(),
                               resource_name=self.name)
            self.resource_id_set(deployment.id)
        else:
            deployment = _call(self, 'update_deployment', self.resource_id,
                               config_id=self.properties[self.CONFIG],
                               input_values=self.properties[self.INPUT_VALUES] or {},
                               action=action)
        return deployment.id

    def _check_complete(self, deployment_id):
        if not deployment_id:
            return True
        try:
            deployment = _call(self, 'wait_for_deployment', deployment_id,
                               timeout=cfg.CONF.halite.check_wait)
        except halite.MasterTimeout:
            return False  # still in progress: Heat checks again
        return _settled(deployment)

    def handle_create(self):
        return self._handle_action(self.CREATE)

    def check_create_complete(self, deployment_id):
        return self._check_complete(deployment_id)

    def handle_update(self, json_snippet, tmpl_diff, prop_diff):
        self.properties = json_snippet.properties(self.properties_schema, self.context)
        return self._handle_action(self.UPDATE)

    def check_update_complete(self, deployment_id):
        return self._check_complete(deployment_id)

    def handle_suspend(self):
        return self._handle_action(self.SUSPEND)

    def check_suspend_complete(self, deployment_id):
        return self._check_complete(deployment_id)

    def handle_resume(self):
        return self._handle_action(self.RESUME)

    def check_resume_complete(self, deployment_id):
        return self._check_complete(deployment_id)

    def handle_delete(self):
        if self.resource_id is None:
            return None
        if self.DELETE in self.properties[self.DEPLOY_ACTIONS] and _server_gone(self, self.properties[self.SERVER]):
            LOG.info('%s: server %s no longer exists; DELETE skipped', self.name, self.properties[self.SERVER])
            return None
        try:
            return self._handle_action(self.DELETE)
        except halite.NotFound:
            return None

    def check_delete_complete(self, deployment_id=None):
        if deployment_id and not self._check_complete(deployment_id):
            return False
        if self.resource_id is not None:
            try:
                _call(self, 'delete_deployment', self.resource_id)
            except halite.NotFound:
                pass
        return True

    def get_attribute(self, key, *path):
        """deploy_stdout, deploy_stderr, deploy_status_code and the config's declared
        outputs, from the deployment's output values."""
        if self.resource_id is not None:
            try:
                outputs = _call(self, 'show_deployment', self.resource_id).output_values
            except halite.NotFound:
                outputs = {}
            if key in outputs:
                return attributes.select_from_attribute(outputs[key], path)
        declared = []
        if self.properties[self.CONFIG]:
            try:
                config = _call(self, 'show_config', self.properties[self.CONFIG])
                declared = [o['name'] for o in config.outputs]
            except halite.NotFound:
                pass
        if key not in declared and key not in self.ATTRIBUTES:
            raise exception.InvalidTemplateAttribute(resource=self.name, key=key)
        return None

    def _show_resource(self):
        return _call(self, 'show_deployment', self.resource_id).to_dict()


class HaliteSoftwareDeploymentGroup(resource.Resource):
    """A config deployed to a map of servers with a halite rollout. A change is made
    in place, as Heat's own group does: the servers it keeps run ``UPDATE`` with the
    new config and inputs, new servers ``CREATE``, servers taken out ``DELETE``
    (where ``actions`` asks); Heat's ``update_policy: {rolling_update:
    {max_batch_size, pause_time}}`` sets how many at once and the pause between,
    with the group's error budget and abort events."""

    support_status = support.SupportStatus(version='27.0.0')

    PROPERTIES = (SERVERS, CONFIG, INPUT_VALUES, DEPLOY_ACTIONS, BATCH_SIZE, BATCH_WAIT,
                  MAX_ERRORS, CANARY, ABORT_ON, NAME, SIGNAL_TRANSPORT) = (
        'servers', 'config', 'input_values', 'actions', 'batch_size', 'batch_wait',
        'max_errors', 'canary', 'abort_on', 'name', 'signal_transport')

    ATTRIBUTES = (STDOUTS, STDERRS, STATUS_CODES) = (
        'deploy_stdouts', 'deploy_stderrs', 'deploy_status_codes')

    properties_schema = {
        SERVERS: properties.Schema(
            properties.Schema.MAP,
            _('Servers to deploy to: a map of names to Nova server IDs (or minion ids).'),
            required=True),
        CONFIG: _DEPLOYMENT.properties_schema[_DEPLOYMENT.CONFIG],
        INPUT_VALUES: _DEPLOYMENT.properties_schema[_DEPLOYMENT.INPUT_VALUES],
        DEPLOY_ACTIONS: _DEPLOYMENT.properties_schema[_DEPLOYMENT.DEPLOY_ACTIONS],
        # As OS::Heat::SoftwareDeploymentGroup has them, so its templates run unchanged: the
        # name is each deployment's, the transport is taken and ignored.
        NAME: _DEPLOYMENT.properties_schema[_DEPLOYMENT.NAME],
        SIGNAL_TRANSPORT: _DEPLOYMENT.properties_schema[_DEPLOYMENT.SIGNAL_TRANSPORT],
        BATCH_SIZE: properties.Schema(
            properties.Schema.STRING,
            _('How many servers deploy at once: a count ("2") or a percentage ("25%").')),
        BATCH_WAIT: properties.Schema(
            properties.Schema.NUMBER, _('Seconds to wait after a server finishes.'),
            default=0, constraints=[constraints.Range(min=0)]),
        MAX_ERRORS: properties.Schema(
            properties.Schema.STRING,
            _('Stop once more servers than this ("1", "10%") failed.')),
        CANARY: properties.Schema(
            properties.Schema.INTEGER,
            _('Deploy to this many servers alone first; the rest only if all succeed.'),
            default=0, constraints=[constraints.Range(min=0)]),
        ABORT_ON: properties.Schema(
            properties.Schema.LIST,
            _('Event tag globs on the halite bus that stop the rollout.'), default=[]),
    }

    UPDATE_POLICY = 'rolling_update'
    ROLLING = (MAX_BATCH_SIZE, PAUSE_TIME) = ('max_batch_size', 'pause_time')

    update_policy_schema = {
        UPDATE_POLICY: properties.Schema(
            properties.Schema.MAP,
            schema={
                MAX_BATCH_SIZE: properties.Schema(
                    properties.Schema.INTEGER, _('Servers updated at once.'), default=1,
                    constraints=[constraints.Range(min=1)]),
                PAUSE_TIME: properties.Schema(
                    properties.Schema.NUMBER, _('Seconds to wait between batches.'), default=0,
                    constraints=[constraints.Range(min=0)]),
            }),
    }

    update_allowed_properties = (SERVERS, CONFIG, INPUT_VALUES, DEPLOY_ACTIONS, BATCH_SIZE, BATCH_WAIT,
                                 MAX_ERRORS, CANARY, ABORT_ON)

    attributes_schema = {
        STDOUTS: attributes.Schema(_('Each server\'s stdout, by name.'), type=attributes.Schema.MAP),
        STDERRS: attributes.Schema(_('Each server\'s stderr, by name.'), type=attributes.Schema.MAP),
        STATUS_CODES: attributes.Schema(_('Each server\'s status code, by name.'),
                                        type=attributes.Schema.MAP),
    }

    def handle_create(self):
        servers = self.properties[self.SERVERS]
        minions = {name: _minion_of(self, server) for name, server in servers.items()}
        self.data_set('minions', ','.join('%s=%s' % item for item in sorted(minions.items())))
        if self.CREATE not in self.properties[self.DEPLOY_ACTIONS]:
            return None
        group = _call(self, 'create_deployment_group',
                      self.properties[self.CONFIG], sorted(minions.values()),
                      input_values=self.properties[self.INPUT_VALUES] or {},
                      stack_id=self.stack.identifier().stack_path(),
                      resource_name=self.name,
                      batch=self.properties[self.BATCH_SIZE],
                      batch_wait=self.properties[self.BATCH_WAIT],
                      max_errors=self.properties[self.MAX_ERRORS],
                      canary=self.properties[self.CANARY],
                      abort_on=self.properties[self.ABORT_ON])
        self.resource_id_set(group.id)
        return group.id

    def check_create_complete(self, group_id):
        if not group_id:
            return True
        try:
            group = _call(self, 'wait_for_deployment_group', group_id, timeout=cfg.CONF.halite.check_wait)
        except halite.MasterTimeout:
            return False
        return _settled(group)

    def handle_update(self, json_snippet, tmpl_diff, prop_diff):
        new = json_snippet.properties(self.properties_schema, self.context)
        minions = {name: _minion_of(self, server) for name, server in new[self.SERVERS].items()}
        kept = set(minions.values())
        by_server = {m.server_id: m.deployment_id for m in self._members()}
        removed = sorted(d for server, d in by_server.items() if server not in kept)
        if self.DELETE in new[self.DEPLOY_ACTIONS]:
            for deployment_id in removed:
                try:
                    _call(self, 'update_deployment', deployment_id, action=self.DELETE)
                except halite.NotFound:
                    pass
        self.properties = new
        self.data_set('minions', ','.join('%s=%s' % item for item in sorted(minions.items())))
        policy = (json_snippet.update_policy(self.update_policy_schema, self.context)
                  .get(self.UPDATE_POLICY) or {})
        batch = policy.get(self.MAX_BATCH_SIZE) or self.properties[self.BATCH_SIZE]
        batch_wait = policy.get(self.PAUSE_TIME) or self.properties[self.BATCH_WAIT]
        rollout = dict(batch=batch, batch_wait=batch_wait, max_errors=self.properties[self.MAX_ERRORS],
                       canary=self.properties[self.CANARY], abort_on=self.properties[self.ABORT_ON])
        if self.resource_id is None:
            group = _call(self, 'create_deployment_group', self.properties[self.CONFIG], sorted(kept),
                          input_values=self.properties[self.INPUT_VALUES] or {},
                          stack_id=self.stack.identifier().stack_path(), resource_name=self.name,
                          **rollout)
            self.resource_id_set(group.id)
        else:
            group = _call(self, 'update_deployment_group', self.resource_id,
                          config_id=self.properties[self.CONFIG],
                          input_values=self.properties[self.INPUT_VALUES] or {},
                          servers=sorted(kept), action=self.UPDATE, **rollout)
        return {'group': group.id, 'removed': removed}

    def check_update_complete(self, data):
        # The servers taken out first: their DELETE, then their deployments.
        while data['removed']:
            deployment_id = data['removed'][0]
            if self.DELETE in self.properties[self.DEPLOY_ACTIONS]:
                try:
                    deployment = _call(self, 'wait_for_deployment', deployment_id,
                                       timeout=cfg.CONF.halite.check_wait)
                except halite.MasterTimeout:
                    return False
                except halite.NotFound:
                    deployment = None
                if deployment is not None:
                    _settled(deployment)
            try:
                _call(self, 'delete_deployment', deployment_id)
            except halite.NotFound:
                pass
            data['removed'].pop(0)
        return self.check_create_complete(data['group'])

    def _minions(self):
        text = self.data().get('minions') or ''
        return dict(item.split('=', 1) for item in text.split(',') if item)

    def _members(self):
        if self.resource_id is None:
            return []
        try:
            return [m for m in _call(self, 'show_deployment_group', self.resource_id).members
                    if m.deployment_id]
        except halite.NotFound:
            return []

    def handle_delete(self):
        members = self._members()
        if self.DELETE in self.properties[self.DEPLOY_ACTIONS]:
            for member in members:
                try:
                    _call(self, 'update_deployment', member.deployment_id, action=self.DELETE)
                except halite.NotFound:
                    pass
        return [m.deployment_id for m in members]

    def check_delete_complete(self, deployment_ids=None):
        for deployment_id in deployment_ids or []:
            if self.DELETE in self.properties[self.DEPLOY_ACTIONS]:
                try:
                    deployment = _call(self, 'wait_for_deployment', deployment_id,
                                       timeout=cfg.CONF.halite.check_wait)
                except halite.NotFound:
                    continue
                except halite.MasterTimeout:
                    return False
                _settled(deployment)
        for deployment_id in deployment_ids or []:
            try:
                _call(self, 'delete_deployment', deployment_id)
            except halite.NotFound:
                pass
        return True

    def get_attribute(self, key, *path):
        output = {self.STDOUTS: 'deploy_stdout', self.STDERRS: 'deploy_stderr',
                  self.STATUS_CODES: 'deploy_status_code'}.get(key, key)
        names = {minion: name for name, minion in self._minions().items()}
        values = {}
        for member in self._members():
            deployment = _call(self, 'show_deployment', member.deployment_id)
            values[names.get(member.server_id, member.server_id)] = deployment.output_values.get(output)
        return attributes.select_from_attribute(values, path)


class HaliteEnrollmentUserData(resource.Resource):
    """A one-time enrollment token for the server that will be named
    ``server_name``, as cloud-init user_data that writes the minion's enrollment
    file. Like Heat's own ``OS::Heat::CloudConfig``, it is a software config in
    Heat's store: give ``OS::Nova::Server`` ``user_data: {get_resource: this}``
    (``user_data_format: SOFTWARE_CONFIG`` or ``RAW``), or ``{get_attr: [this,
    user_data]}``, or make it a part of an ``OS::Heat::MultipartMime``. Deleting it
    revokes the token if it was not used."""

    support_status = support.SupportStatus(version='27.0.0')

    PROPERTIES = (SERVER_NAME, TTL, MASTERS) = ('server_name', 'ttl', 'masters')
    ATTRIBUTES = (USER_DATA, ENROLLMENT, CONFIG) = ('user_data', 'enrollment', 'config')

    properties_schema = {
        SERVER_NAME: properties.Schema(
            properties.Schema.STRING,
            _('The server\'s name: the id its minion enrolls as.'), required=True),
        TTL: properties.Schema(
            properties.Schema.INTEGER, _('Seconds the token stays valid.'),
            default=3600, constraints=[constraints.Range(min=1)]),
        MASTERS: properties.Schema(
            properties.Schema.LIST,
            _('Master addresses the guest reaches (default: [halite] '
              'enrollment_masters, else the master Heat uses).'), default=[]),
    }

    attributes_schema = {
        USER_DATA: attributes.Schema(_('The #cloud-config user_data.'), type=attributes.Schema.STRING),
        ENROLLMENT: attributes.Schema(_('The enrollment file it writes.'), type=attributes.Schema.STRING),
        CONFIG: attributes.Schema(_('The #cloud-config user_data (as Heat\'s CloudConfig names it).'),
                                  type=attributes.Schema.STRING),
    }

    def handle_create(self):
        masters = self.properties[self.MASTERS] or cfg.CONF.halite.enrollment_masters
        # Never replace=True: a stack must not take over a minion that is already enrolled
        # under this name (the master refuses with halite.Conflict, failing the resource).
        enrollment = _call(self, 'create_enrollment', _in_namespace(self, self.properties[self.SERVER_NAME]),
                           ttl=self.properties[self.TTL], masters=masters, replace=False)
        self.data_set('minion', enrollment.minion)
        self.data_set('user_data', enrollment.user_data, redact=True)
        self.data_set('enrollment', enrollment.enrollment, redact=True)
        self.data_set('expires_at_ms', str(enrollment.expires_at_ms))
        # A config in Heat's own store, as OS::Heat::CloudConfig makes: what OS::Nova::Server
        # loads when its user_data is this resource's id (SOFTWARE_CONFIG or RAW format).
        sc = self.rpc_client().create_software_config(
            self.context, name=self.physical_resource_name(), group='Heat::Ungrouped',
            config=enrollment.user_data, inputs=[], outputs=[], options={})
        self.resource_id_set(sc[rpc_api.SOFTWARE_CONFIG_ID])

    def handle_delete(self):
        data = self.data()
        # Resources made before the config was in Heat's store have the minion as their id.
        minion = data.get('minion', self.resource_id)
        if 'minion' in data and self.resource_id is not None:
            with self.rpc_client().ignore_error_by_name('NotFound'):
                self.rpc_client().delete_software_config(self.context, self.resource_id)
        if minion is None:
            return
        expires = data.get('expires_at_ms')
        for token in _call(self, 'enrollment_tokens'):
            if token.minion == minion and str(token.expires_at_ms) == expires and not token.used:
                try:
                    _call(self, 'revoke_enrollment_token', token.id)
                except halite.NotFound:
                    pass

    def _resolve_attribute(self, name):
        if name in (self.USER_DATA, self.CONFIG):
            return self.data().get(self.USER_DATA)
        if name == self.ENROLLMENT:
            return self.data().get(name)


def available_resource_mapping():
    if halite is None:
        LOG.warning('halite resources unavailable: the halite Python package is not installed')
        return {}
    return {
        'OS::Halite::SoftwareConfig': HaliteSoftwareConfig,
        'OS::Halite::SoftwareDeployment': HaliteSoftwareDeployment,
        'OS::Halite::SoftwareDeploymentGroup': HaliteSoftwareDeploymentGroup,
        'OS::Halite::EnrollmentUserData': HaliteEnrollmentUserData,
    }
