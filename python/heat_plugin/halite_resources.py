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

The resources:

``OS::Halite::SoftwareConfig``
    ``OS::Heat::SoftwareConfig``'s properties, stored in halite.
``OS::Halite::SoftwareDeployment``
    ``OS::Heat::SoftwareDeployment``'s properties (``config``, ``server``,
    ``input_values``, ``actions``, ``name``); halite pushes the config to the
    server's minion and pushes its outputs back, and the resource completes
    when halite says ``COMPLETE`` or fails with halite's reason. ``server`` is
    a Nova server (its minion is named like it) or a minion id.
``OS::Halite::SoftwareDeploymentGroup``
    The same for a map of servers, rolled out with halite's options
    (``batch_size``, ``batch_wait``, ``max_errors``, ``canary``, ``abort_on``).
``OS::Halite::EnrollmentUserData``
    A one-time enrollment token bound to a server's name, as the cloud-init
    ``user_data`` to give ``OS::Nova::Server`` (with ``user_data_format: RAW``).
"""

import os

from oslo_config import cfg
from oslo_log import log as logging

from heat.common import exception
from heat.common.i18n import _
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


def _call(method, *args, **kwargs):
    """A call on the halite client; halite's errors become Heat's, except
    ``NotFound`` and ``MasterTimeout`` (a wait that ran out), which callers handle."""
    try:
        return _blocking(getattr(halite_client(), method), *args, **kwargs)
    except (halite.NotFound, halite.MasterTimeout):
        raise  # the callers handle these
    except halite.HaliteError as error:
        raise exception.Error(_('halite: %s') % error)


def _minion_of(res, server):
    """The minion id of ``server``: a Nova server's name, or the value itself when
    it is not a Nova server (a minion outside Nova)."""
    try:
        return res.client_plugin('nova').get_server(server).name
    except exception.EntityNotFound:
        return server
    except Exception as error:  # no Nova endpoint in this cloud
        LOG.debug('%s: %s is not a Nova server (%s); using it as the minion id',
                  res.name, server, error)
        return server


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
    """``OS::Heat::SoftwareConfig``, stored in halite."""

    support_status = support.SupportStatus(version='27.0.0')
    default_client_name = None
    entity = None

    def handle_create(self):
        config = _call('create_config',
                       self.properties[self.CONFIG] or '',
                       group=self.properties[self.GROUP],
                       inputs=_inputs(self.properties[self.INPUTS]),
                       outputs=_outputs(self.properties[self.OUTPUTS]),
                       options=self.properties[self.OPTIONS],
                       name=self.physical_resource_name())
        self.resource_id_set(config.id)

    def handle_delete(self):
        if self.resource_id is None:
            return
        try:
            _call('delete_config', self.resource_id)
        except halite.NotFound:
            pass

    def _resolve_attribute(self, name):
        if name == self.CONFIG_ATTR and self.resource_id:
            try:
                return _call('show_config', self.resource_id).config
            except halite.NotFound:
                return ''

    def _show_resource(self):
        return _call('show_config', self.resource_id).to_dict()


_DEPLOYMENT = software_deployment.SoftwareDeployment


class HaliteSoftwareDeployment(resource.Resource):
    """``OS::Heat::SoftwareDeployment``, carried out by halite: the master pushes
    the config to the server's minion, the minion pushes its outputs back."""

    support_status = support.SupportStatus(version='27.0.0')

    PROPERTIES = (CONFIG, SERVER, INPUT_VALUES, DEPLOY_ACTIONS, NAME, SIGNAL_TRANSPORT) = (
        _DEPLOYMENT.CONFIG, _DEPLOYMENT.SERVER, _DEPLOYMENT.INPUT_VALUES,
        _DEPLOYMENT.DEPLOY_ACTIONS, _DEPLOYMENT.NAME, _DEPLOYMENT.SIGNAL_TRANSPORT)

    # The same properties as OS::Heat::SoftwareDeployment (signal_transport is
    # accepted for templates written for it: halite always pushes).
    properties_schema = {name: _DEPLOYMENT.properties_schema[name] for name in PROPERTIES}

    ATTRIBUTES = (STDOUT, STDERR, STATUS_CODE) = _DEPLOYMENT.ATTRIBUTES

    attributes_schema = dict(_DEPLOYMENT.attributes_schema)

    def _minion(self):
        minion = self.data().get('minion')
        if minion is None:
            minion = _minion_of(self, self.properties[self.SERVER])
            self.data_set('minion', minion)
        return minion

    def _handle_action(self, action):
        if action not in self.properties[self.DEPLOY_ACTIONS]:
            return None
        if self.resource_id is None:
            config_id = self.properties[self.CONFIG]
            try:
                _call('show_config', config_id)
            except halite.NotFound:
                raise exception.Error(_('halite has no software config %s: make it an '
                                        'OS::Halite::SoftwareConfig') % config_id)
            deployment = _call('create_deployment',
                               config_id,
                               self._minion(),
                               input_values=self.properties[self.INPUT_VALUES] or {},
                               action=action,
                               stack_id=self.stack.identifier().stack_path(),
                               resource_name=self.name)
            self.resource_id_set(deployment.id)
        else:
            deployment = _call('update_deployment', self.resource_id,
                               config_id=self.properties[self.CONFIG],
                               input_values=self.properties[self.INPUT_VALUES] or {},
                               action=action)
        return deployment.id

    def _check_complete(self, deployment_id):
        if not deployment_id:
            return True
        try:
            deployment = _call('wait_for_deployment', deployment_id,
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
        try:
            return self._handle_action(self.DELETE)
        except halite.NotFound:
            return None

    def check_delete_complete(self, deployment_id=None):
        if deployment_id and not self._check_complete(deployment_id):
            return False
        if self.resource_id is not None:
            try:
                _call('delete_deployment', self.resource_id)
            except halite.NotFound:
                pass
        return True

    def get_attribute(self, key, *path):
        """deploy_stdout, deploy_stderr, deploy_status_code and the config's declared
        outputs, from the deployment's output values."""
        if self.resource_id is not None:
            try:
                outputs = _call('show_deployment', self.resource_id).output_values
            except halite.NotFound:
                outputs = {}
            if key in outputs:
                return attributes.select_from_attribute(outputs[key], path)
        declared = []
        if self.properties[self.CONFIG]:
            try:
                config = _call('show_config', self.properties[self.CONFIG])
                declared = [o['name'] for o in config.outputs]
            except halite.NotFound:
                pass
        if key not in declared and key not in self.ATTRIBUTES:
            raise exception.InvalidTemplateAttribute(resource=self.name, key=key)
        return None

    def _show_resource(self):
        return _call('show_deployment', self.resource_id).to_dict()


class HaliteSoftwareDeploymentGroup(resource.Resource):
    """A config deployed to a map of servers with a halite rollout. Any change of
    its properties replaces it (a new group rolls out; the old one's deployments
    are deleted, running DELETE where ``actions`` asks)."""

    support_status = support.SupportStatus(version='27.0.0')

    PROPERTIES = (SERVERS, CONFIG, INPUT_VALUES, DEPLOY_ACTIONS, BATCH_SIZE, BATCH_WAIT,
                  MAX_ERRORS, CANARY, ABORT_ON) = (
        'servers', 'config', 'input_values', 'actions', 'batch_size', 'batch_wait',
        'max_errors', 'canary', 'abort_on')

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
        group = _call('create_deployment_group',
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
            group = _call('wait_for_deployment_group', group_id, timeout=cfg.CONF.halite.check_wait)
        except halite.MasterTimeout:
            return False
        return _settled(group)

    def _minions(self):
        text = self.data().get('minions') or ''
        return dict(item.split('=', 1) for item in text.split(',') if item)

    def _members(self):
        if self.resource_id is None:
            return []
        try:
            return [m for m in _call('show_deployment_group', self.resource_id).members
                    if m.deployment_id]
        except halite.NotFound:
            return []

    def handle_delete(self):
        members = self._members()
        if self.DELETE in self.properties[self.DEPLOY_ACTIONS]:
            for member in members:
                try:
                    _call('update_deployment', member.deployment_id, action=self.DELETE)
                except halite.NotFound:
                    pass
        return [m.deployment_id for m in members]

    def check_delete_complete(self, deployment_ids=None):
        for deployment_id in deployment_ids or []:
            if self.DELETE in self.properties[self.DEPLOY_ACTIONS]:
                try:
                    deployment = _call('wait_for_deployment', deployment_id,
                                       timeout=cfg.CONF.halite.check_wait)
                except halite.NotFound:
                    continue
                except halite.MasterTimeout:
                    return False
                _settled(deployment)
        for deployment_id in deployment_ids or []:
            try:
                _call('delete_deployment', deployment_id)
            except halite.NotFound:
                pass
        return True

    def get_attribute(self, key, *path):
        output = {self.STDOUTS: 'deploy_stdout', self.STDERRS: 'deploy_stderr',
                  self.STATUS_CODES: 'deploy_status_code'}.get(key, key)
        names = {minion: name for name, minion in self._minions().items()}
        values = {}
        for member in self._members():
            deployment = _call('show_deployment', member.deployment_id)
            values[names.get(member.server_id, member.server_id)] = deployment.output_values.get(output)
        return attributes.select_from_attribute(values, path)


class HaliteEnrollmentUserData(resource.Resource):
    """A one-time enrollment token for the server that will be named
    ``server_name``, as cloud-init user_data that writes the minion's enrollment
    file. Pass ``{get_attr: [this, user_data]}`` to ``OS::Nova::Server``'s
    ``user_data`` with ``user_data_format: RAW``. Deleting it revokes the token if
    it was not used."""

    support_status = support.SupportStatus(version='27.0.0')

    PROPERTIES = (SERVER_NAME, TTL, MASTERS) = ('server_name', 'ttl', 'masters')
    ATTRIBUTES = (USER_DATA, ENROLLMENT) = ('user_data', 'enrollment')

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
    }

    def handle_create(self):
        masters = self.properties[self.MASTERS] or cfg.CONF.halite.enrollment_masters
        # Never replace=True: a stack must not take over a minion that is already enrolled
        # under this name (the master refuses with halite.Conflict, failing the resource).
        enrollment = _call('create_enrollment', self.properties[self.SERVER_NAME],
                           ttl=self.properties[self.TTL], masters=masters, replace=False)
        self.data_set('user_data', enrollment.user_data, redact=True)
        self.data_set('enrollment', enrollment.enrollment, redact=True)
        self.data_set('expires_at_ms', str(enrollment.expires_at_ms))
        self.resource_id_set(enrollment.minion)

    def handle_delete(self):
        if self.resource_id is None:
            return
        expires = self.data().get('expires_at_ms')
        for token in _call('enrollment_tokens'):
            if token.minion == self.resource_id and str(token.expires_at_ms) == expires and not token.used:
                try:
                    _call('revoke_enrollment_token', token.id)
                except halite.NotFound:
                    pass

    def _resolve_attribute(self, name):
        if name in (self.USER_DATA, self.ENROLLMENT):
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
