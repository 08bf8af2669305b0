"""Write a result's tables to a directory: parquet and JSON per result, with a manifest."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..result import Result
from .formats import to_json_obj


def write_outputs(result: Result, out: Path) -> Path:
    """Every table as parquet and JSON, plus a manifest; returns the manifest's path."""
    out.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, Any] = {"command": result.command, "schema": result.schema, "tables": {}}
    for name, df in result.tables.items():
        pq_path = out / f"{name}.parquet"
        df.to_parquet(pq_path, index=False)
        manifest["tables"][name] = {"parquet": pq_path.name, "rows": int(len(df)), "columns": list(df.columns)}
    (out / f"{result.command}.json").write_text(json.dumps(to_json_obj(result), indent=1) + "\n")
    manifest["json"] = f"{result.command}.json"
    path = out / "manifest.json"
    path.write_text(json.dumps(manifest, indent=1) + "\n")
    return path
