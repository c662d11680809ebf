"""``rllib_integration.core``'s lazy names: a module of the core is the same object whatever was imported before."""

import subprocess
import sys

import pytest

ORDERS = {
    "package first": "import rllib_integration.core as c; a = c.warm_start; import rllib_integration.core.warm_start",
    "module first": "import rllib_integration.core.warm_start; import rllib_integration.core as c; a = c.warm_start",
    "from-import": "from rllib_integration.core import warm_start as a; import rllib_integration.core as c",
}


@pytest.mark.parametrize("order", sorted(ORDERS))
def test_core_warm_start_is_its_module_in_any_import_order(order):
    # the old package exported the function under the module's name: the answer depended on the import order
    code = (ORDERS[order] + "; import types; assert isinstance(a, types.ModuleType), a; "
            "assert a is c.warm_start and callable(a.warm_start); print('ok')")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]


def test_unknown_name_is_an_attribute_error():
    import rllib_integration.core as c

    with pytest.raises(AttributeError, match="no attribute 'no_such_thing'"):
        c.no_such_thing  # noqa: B018
    assert c.compute_advantages.__module__ == "rllib_integration.core.advantages"
