"""The plugin's mapping of a Heat project to its halite tenant (``_tenant_of``): one
tenant per project, never shared, the same on every host and across upgrades, and a
valid tenant name (no ``-``). Pure Python: no master, no Heat engine.

Run with the venv that has openstack-heat (scripts/test.sh makes it)."""

import hashlib
import importlib.util
import re
import types
from pathlib import Path

# Heat's test framework first: it selects oslo.service's threading backend, which
# must happen before any other Heat module selects one (as in test_heat_stack.py).
from heat.tests import common  # noqa: F401,I100

import pytest
from heat.common import exception

PLUGIN = Path(__file__).resolve().parent.parent / "halite_resources.py"
_spec = importlib.util.spec_from_file_location("halite_resources_under_test", PLUGIN)
plugin = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plugin)

# A valid halite id (protocol/src/id.rs) and tenant name (no '-', message/tenant.rs).
VALID_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")

KEYSTONE_ID = "6f1ed002ab5595859014ebf0951522d9"  # uuid4().hex, as Keystone makes them
DASHED_UUID = "2f8a1c3e-4b5d-4e6f-8a7b-9c0d1e2f3a4b"
LONG = "a" * 40
LONG_SAME_32 = "a" * 32 + "b" * 8  # its first 32 characters are LONG's

# Ids that the old rule (lowercase, keep [a-z0-9], cut at 32) folded together, and others
# that must each get a tenant of their own.
PROJECTS = [
    "Proj-B", "projb", "PROJB", "proj_b", "proj.b", "proj b", "-projb", ".projb", "projb-", "projb\n",
    LONG, LONG_SAME_32, "a" * 32, "a" * 33,
    DASHED_UUID, DASHED_UUID.replace("-", ""), DASHED_UUID.upper(), KEYSTONE_ID, KEYSTONE_ID.upper(),
    "projé", "proje\u0301", "проект", "项目", "\U0001f600", "Ω", "\u212a",  # Kelvin sign: lower() is "k"
    "k", "_", "-", ".", " ", "0",
]


def tenant_of(project, attribute="project_id"):
    return plugin._tenant_of(types.SimpleNamespace(**{attribute: project}))


def test_every_project_gets_a_tenant_of_its_own():
    tenants = {project: tenant_of(project) for project in PROJECTS}
    assert len(set(tenants.values())) == len(PROJECTS), tenants
    # The principals (heat-<tenant>) are as distinct as the tenants.
    assert len({plugin._tenant_principal(t) for t in tenants.values()}) == len(PROJECTS)


def test_ids_the_old_rule_folded_together_are_told_apart():
    folded = ["Proj-B", "projb", "PROJB", "proj_b", "proj.b"]
    assert len({tenant_of(p) for p in folded}) == len(folded)
    assert tenant_of(LONG) != tenant_of(LONG_SAME_32)
    assert tenant_of(DASHED_UUID) != tenant_of(DASHED_UUID.replace("-", ""))


def test_every_tenant_is_a_valid_tenant_name_without_a_dash():
    for project in PROJECTS:
        tenant = tenant_of(project)
        assert VALID_ID.fullmatch(tenant), (project, tenant)
        assert "-" not in tenant, (project, tenant)
        assert re.fullmatch(r"[a-z0-9_]{1,49}", tenant), (project, tenant)
        # The principal and a server's minion id are valid ids too.
        assert VALID_ID.fullmatch(plugin._tenant_principal(tenant))
        assert VALID_ID.fullmatch(f"{tenant}-{'v' * 63}")


def test_keystone_ids_and_plain_lowercase_names_keep_their_names():
    """The old mapping's result for such ids, so tenants registered before keep their
    name, principal and derived key across the upgrade."""
    for project in (KEYSTONE_ID, DASHED_UUID.replace("-", ""), "projb", "0", "a" * 32):
        assert tenant_of(project) == project


def test_the_mapping_is_fixed():
    """Hard-coded: a change of the function (its hash's prefix, cut or form) would move
    every project registered before to a new tenant, principal, key and namespace."""
    expected = {
        KEYSTONE_ID: KEYSTONE_ID,
        "projb": "projb",
        "Proj-B": "projb_30ff74a1c1cbb9d479bdbc6e94dfafcf",
        "PROJB": "projb_1d4e926d8f223a4d5d9253cff4fcfb94",
        "proj_b": "projb_13f18c6810cfd57b242f68a8757ee9fa",
        "proj.b": "projb_3823215837827b5aa136db3dbe3c0118",
        DASHED_UUID: "2f8a1c3e4b5d4e6f_b0159be437541f748f0fbbc2b35fd4dc",
        LONG: "aaaaaaaaaaaaaaaa_e9f3364f4f54e49a6b9d075ea975dcfd",
        "Projekt Ä": "projekt_fa0a082e4e9279233c1a97eabd314a69",
        "проект": "p_979022898868e9626a038192a331c9d2",
    }
    assert {p: tenant_of(p) for p in expected} == expected


def test_other_ids_are_a_readable_prefix_and_a_hash_of_the_whole_id():
    for project in PROJECTS:
        if re.fullmatch(r"[a-z0-9]{1,32}", project):
            continue
        readable = re.sub("[^a-z0-9]", "", project.lower())[:16] or "p"
        digest = hashlib.sha256(b"halite heat project\x00" + project.encode("utf-8")).hexdigest()[:32]
        assert tenant_of(project) == f"{readable}_{digest}", project


def test_the_tenant_id_of_an_older_context_counts_too():
    assert tenant_of("Proj-B", attribute="tenant_id") == tenant_of("Proj-B")


@pytest.mark.parametrize("project", [None, ""])
def test_a_stack_without_a_project_is_refused(project):
    with pytest.raises(exception.Error, match="no project to act for"):
        tenant_of(project)
    with pytest.raises(exception.Error, match="no project to act for"):
        plugin._tenant_of(types.SimpleNamespace())
