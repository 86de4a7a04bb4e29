"""PYTHONPATH injection: the bootstrap sitecustomize, its chaining, spawn children and `eagle-probe run`."""

import json
import os
import subprocess
import sys

import pytest

from eagle_probe.bootstrap import BOOTSTRAP_DIR

REPORT = ("import json, os, sys, sitecustomize; from eagle_probe.runtime.state import STATE; "
          "print(json.dumps({'active': STATE.active, 'shadowed': os.environ.get('SHADOWED_RAN'), "
          "'pythonpath': os.environ.get('PYTHONPATH')}))")


@pytest.fixture
def user_site(tmp_path):
    """A user's own sitecustomize that the bootstrap shadows and must still run."""
    site = tmp_path / "usersite"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['SHADOWED_RAN'] = 'yes'\n")
    return str(site)


def run_python(code, env_extra, pythonpath, script=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLE_PROBE_")}
    env.update(env_extra)
    env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    argv = [sys.executable, str(script)] if script else [sys.executable, "-c", code]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def test_bootstrap_installs_and_chains_the_shadowed_sitecustomize(user_site):
    proc = run_python(REPORT, {}, [BOOTSTRAP_DIR, user_site])
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["active"] is True and out["shadowed"] == "yes"


def test_disabled_by_environment(user_site):
    proc = run_python(REPORT, {"EAGLE_PROBE_ENABLED": "0"}, [BOOTSTRAP_DIR, user_site])
    out = json.loads(proc.stdout)
    assert out["active"] is False and out["shadowed"] == "yes"


def test_bad_value_logs_one_error_and_process_runs_normally(user_site):
    proc = run_python(REPORT, {"EAGLE_PROBE_METRICS_PORT": "http"}, [BOOTSTRAP_DIR, user_site])
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["active"] is False
    errors = [json.loads(line) for line in proc.stderr.splitlines() if "eagle_probe.config_error" in line]
    assert len(errors) == 1
    assert errors[0]["variable"] == "EAGLE_PROBE_METRICS_PORT" and "1-65535" in errors[0]["accepted"]


def test_spawned_children_load_the_probe(user_site, tmp_path):
    script = tmp_path / "spawner.py"  # spawn re-imports __main__, so it must be a file
    script.write_text("import multiprocessing as mp, json\n"
            "def child(q):\n"
            "    from eagle_probe.runtime.state import STATE; import os\n"
            "    q.put((STATE.active, os.environ.get('SHADOWED_RAN')))\n"
            "if __name__ == '__main__':\n"
            "    ctx = mp.get_context('spawn'); q = ctx.Queue(); p = ctx.Process(target=child, args=(q,))\n"
            "    p.start(); print(json.dumps(q.get(timeout=60))); p.join()\n")
    proc = run_python(None, {}, [BOOTSTRAP_DIR, user_site], script=script)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [True, "yes"]


def test_run_puts_bootstrap_first_keeps_user_entries_and_execs(user_site, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLE_PROBE_")}
    env["PYTHONPATH"] = user_site
    proc = subprocess.run([sys.executable, "-m", "eagle_probe", "run", "--log-dir", str(tmp_path / "logs"),
                           "--metrics-port", "9555", "--", sys.executable, "-c",
                           REPORT + "; print(os.environ['EAGLE_PROBE_LOG_DIR'], "
                           "os.environ['EAGLE_PROBE_METRICS_PORT'])"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()
    out = json.loads(first)
    assert out["pythonpath"].split(os.pathsep)[:2] == [BOOTSTRAP_DIR, user_site]
    assert out["active"] is True and out["shadowed"] == "yes"
    assert second == f"{tmp_path / 'logs'} 9555"


def test_run_rejects_bad_values_before_launching(tmp_path):
    marker = tmp_path / "launched"
    proc = subprocess.run([sys.executable, "-m", "eagle_probe", "run", "--summary-interval", "0", "--",
                           "touch", str(marker)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and not marker.exists()
    assert "EAGLE_PROBE_SUMMARY_INTERVAL_S" in proc.stderr and "> 0" in proc.stderr


def test_bootstrap_path_command():
    proc = subprocess.run([sys.executable, "-m", "eagle_probe", "bootstrap-path"], capture_output=True, text=True)
    assert proc.stdout.strip() == BOOTSTRAP_DIR
    assert os.path.isfile(os.path.join(proc.stdout.strip(), "sitecustomize.py"))
