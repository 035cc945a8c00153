"""``cdc-assets convert``: a ``cdc_assets.yaml`` as one ``defs.yaml`` per source.

Each source of the file becomes the component instance ``<defs>/<source>/defs.yaml`` of type
``cdc_assets.SqlServerCdcSource``: its settings as written (nothing added, environment variable
names kept), with the file's ``storage`` and ``spark``, and ``examples`` on the first source.
Paths relative to the file are rewritten relative to the project's root, as a component's are.
The file is validated before anything is written, each written ``defs.yaml`` after, and an
existing ``defs.yaml`` is never overwritten. The file itself is left alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cdc_assets.config import ConfigError, config_path, load_config, parse_source_component

COMPONENT_TYPE = "cdc_assets.SqlServerCdcSource"


@dataclass(frozen=True)
class Written:
    source: str
    path: Path


def _relative(value: str, config_dir: Path, project_root: Path) -> str:
    """A path written relative to the config file, relative to the project's root instead."""
    if "://" in value or Path(value).expanduser().is_absolute():
        return value
    return os.path.relpath(config_dir / value, project_root)


def _attributes(
    source: dict[str, Any], data: dict[str, Any], config_dir: Path, project_root: Path
) -> dict[str, Any]:
    attributes = dict(source)
    connection = attributes.get("connection")
    if isinstance(connection, dict) and isinstance(connection.get("emulator"), dict):
        emulator = dict(connection["emulator"])
        if isinstance(emulator.get("path"), str):
            emulator["path"] = _relative(emulator["path"], config_dir, project_root)
        attributes["connection"] = dict(connection, emulator=emulator)
    storage = dict(data["storage"])
    if isinstance(storage.get("base_path"), str):
        storage["base_path"] = _relative(storage["base_path"], config_dir, project_root)
    attributes["storage"] = storage
    if "spark" in data:
        attributes["spark"] = data["spark"]
    return attributes


def convert(config: str | Path | None, defs_dir: Path, project_root: Path) -> list[Written]:
    """Write ``<defs_dir>/<source>/defs.yaml`` per source of ``config``; what was written."""
    file = config_path(config)
    load_config(file)  # a bad file is refused with its one line, before anything is written
    data = yaml.safe_load(file.read_text(encoding="utf-8"))
    targets = [defs_dir / source["name"] / "defs.yaml" for source in data["sources"]]
    existing = [str(t) for t in targets if t.exists()]
    if existing:
        raise ConfigError(
            f"{', '.join(existing)} already exist: remove them or convert into another folder "
            "(--to)"
        )
    written = []
    for index, (source, target) in enumerate(zip(data["sources"], targets, strict=True)):
        attributes = _attributes(source, data, file.parent, project_root)
        if index == 0 and data.get("examples"):
            attributes["examples"] = data["examples"]
        parse_source_component(attributes, base_dir=project_root, origin=str(target))
        header = (
            f"# Converted from {file} by `cdc-assets convert`: source {source['name']!r}.\n"
            "# Paths are relative to the project's root. Check: dg check defs; see: dg list defs.\n"
        )
        body = yaml.safe_dump({"type": COMPONENT_TYPE, "attributes": attributes}, sort_keys=False)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(header + body, encoding="utf-8")
        written.append(Written(source["name"], target))
    return written
