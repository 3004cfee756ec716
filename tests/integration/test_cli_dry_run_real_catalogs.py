"""`reelqueue import --dry-run --json` on every real catalog export: a report, never a traceback.

No servers are needed for a dry run; image URLs point at the public internet, which this machine
cannot reach, so they must be classified (human review) quickly instead of hanging.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CATALOGS = ROOT.parent / "shared" / "catalogs"
PLAN = ROOT / "examples" / "plan.toml"
# A plain clone has no shared/ beside it: these tests then skip, saying where they looked.
pytestmark = pytest.mark.skipif(not CATALOGS.is_dir(), reason=f"shared catalog corpus not found at {CATALOGS}")
FILES = sorted(p for p in CATALOGS.rglob("*") if p.suffix in (".csv", ".tsv"))
EXPECTED_PRODUCTS = {
    "shopifypartners__apparel.csv": 20,
    "shopifypartners__home-and-garden.csv": 20,
    "shopifypartners__jewelery.csv": 20,
    "kcohen1997__product_template.csv": 3,
    "hirachu__product_template_2025format.csv": 2,  # one of them (a digital product) has no image
    "woocommerce_official_sample_products__2018_verbatim_via_classic-commerce_b3af5c808.csv": 18,
    "wix-ucp-tpa__data_products-feed.tsv": 5,
}


def _dry_run(path: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REELQUEUE_") and k != "DATABASE_URL"}
    env["REELQUEUE_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, str(ROOT / "starter.py"), "import", str(path), "--plan", str(PLAN), "--dry-run", "--json"],
        capture_output=True, text=True, env=env, timeout=120, cwd=ROOT,
    )


def test_there_are_real_catalogs():
    assert len(FILES) >= 14, f"expected the shared catalogs at {CATALOGS}"


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_dry_run_writes_a_report(path: Path, tmp_path: Path):
    result = _dry_run(path, tmp_path)
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.returncode in (0, 2), result.stderr[-2000:]
    out = json.loads(result.stdout)
    assert out["status"] in ("DRY_RUN", "REJECTED") and out["import_id"] is None
    report = json.loads(Path(out["report"]).read_text())
    assert report["summary"]["file_sha256"] == out["file_sha256"]
    for issue in report["issues"]:
        assert set(issue) == {"row", "product_id", "field", "value", "reason", "action"}
    if path.name in EXPECTED_PRODUCTS:
        assert out["products"] == EXPECTED_PRODUCTS[path.name]
        assert result.returncode == 0
    unreachable = [i for i in report["issues"] if i["action"] == "human_review" and i["field"] == "image_url"]
    if out["products"] and "stoa" not in path.name:
        assert unreachable, "public image hosts are unreachable here and must go to human review"
        assert out["tasks"] == 0


def test_ragged_rows_are_named_in_the_report(tmp_path: Path):
    path = CATALOGS / "shopify" / "stoa__product_template_2025format.csv"
    out = json.loads(_dry_run(path, tmp_path).stdout)
    issues = json.loads(Path(out["report"]).read_text())["issues"]
    ragged = sorted(i["row"] for i in issues if i["field"] == "(row)")
    assert ragged == list(range(2, 30))


def test_unknown_headers_exit_2_naming_headers_and_missing_fields(tmp_path: Path):
    odd = tmp_path / "odd.csv"
    odd.write_text("colour,size,weight\nred,M,1\n")
    result = _dry_run(odd, tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    out = json.loads(result.stdout)
    assert out["headers_found"] == ["colour", "size", "weight"] and "product_id" in out["missing_fields"]
