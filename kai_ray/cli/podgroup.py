"""``kai-ray podgroup -f FILE``: show the PodGroup(s) kai-ray would create for Ray manifests."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from kai_ray.api.loader import (
    SIM_SCENARIO,
    ManifestError,
    decode_text,
    describe,
    load_documents,
    located,
    parse_object,
    read_bytes,
    read_text,
    what_is,
)
from kai_ray.api.names import key_problems, priority_problems
from kai_ray.api.ray import RayCluster, RayJob, RayService
from kai_ray.api.strict import refused_fields, unknown_fields
from kai_ray.cli import CliError, StrictOpt, app, note, output_format, warn_or_fail
from kai_ray.cli.output import dump_yaml_all
from kai_ray.constants import INVALID, RAY_KINDS
from kai_ray.podgrouper import GroupingError, PodgrouperConfig, group, ray_resource_warnings
from kai_ray.podgrouper.gang_findings import explain


def read_source(path: str) -> tuple[str, str]:
    """Read FILE or stdin ('-') as text; a missing, unreadable or undecodable file is a one-line error."""
    try:
        if path == "-":
            raw = getattr(sys.stdin, "buffer", None)  # None when a caller replaced stdin with a text stream
            if raw is None:
                return sys.stdin.read(), "<stdin>"
            return decode_text(read_bytes(raw, "<stdin>"), "<stdin>"), "<stdin>"
        return read_text(path), path
    except OSError as exc:
        raise CliError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ManifestError as exc:
        raise CliError(str(exc)) from None


def podgroups_from_text(
    text: str, source: str, config: PodgrouperConfig, strict: bool = False
) -> list[dict[str, object]]:
    """PodGroups for the Ray CRs in a manifest stream. Other documents (a Role, a Service) are skipped with a note;
    unknown fields are warnings (errors with ``strict``); a resource Kubernetes would refuse, a gang kai-ray refuses,
    a bad Ray CR or a file that is not manifests at all is an error."""
    out: list[dict[str, object]] = []
    skipped: list[str] = []
    suspended: list[str] = []
    shapes: list[str] = []  # what a legal gang became, noted once every document is read
    try:
        for where, doc in load_documents(text, source):
            kind = doc.get("kind") if isinstance(doc, dict) else None
            if kind not in RAY_KINDS:
                if not isinstance(doc, dict) or not kind:
                    what = what_is(doc)
                    hint = f"; `kai-ray simulate {source}` runs it" if what == SIM_SCENARIO else ""
                    raise CliError(f"{where} is {what}, not a Kubernetes manifest{hint}")
                skipped.append(f"{where} ({describe(doc)})")
                continue
            label = f"{where} ({describe(doc)})"
            for bad in refused_fields(doc):
                raise CliError(f"{label}: {bad}")
            for unknown in unknown_fields(doc):
                warn_or_fail(f"{label}: {unknown.located()}", strict)
            for key in key_problems(doc):
                warn_or_fail(f"{label}: {key}", strict)
            for priority in priority_problems(doc, config.priority_classes, every=False):
                warn_or_fail(f"{label}: {priority}", strict, ignored=False)
            obj = parse_object(doc, where)
            assert isinstance(obj, RayCluster | RayJob | RayService)
            try:
                pg = group(obj, config=config)
            except GroupingError as exc:
                raise CliError(located(label, str(exc), doc)) from None
            problem = pg.metadata.annotations.get(INVALID)
            if problem:  # the operator would still write this PodGroup, to explain on it why nothing is scheduled
                raise CliError(located(label, problem, doc))
            for mismatch in ray_resource_warnings(obj):
                warn_or_fail(f"{label}: {mismatch}", strict)
            for finding in explain(obj, pg):
                if finding.reason == "Suspended":
                    continue  # noted below, with what podgroup shows for it
                if finding.type == "Warning":
                    warn_or_fail(f"{label}: {finding.message}", strict, ignored=False)
                else:
                    shapes.append(f"{label}: {finding.message}")
            out.append(pg.to_dict())
            if isinstance(obj, RayJob) and (doc.get("spec") or {}).get("suspend") is True:
                suspended.append(label)
    except ManifestError as exc:
        raise CliError(str(exc)) from None
    if not out:
        if skipped:
            more = f" and {len(skipped) - 1} more" if len(skipped) > 1 else ""
            first = f"{skipped[0]}{more} is not a Ray CR"
            raise CliError(f"no Ray CR (RayCluster, RayJob or RayService) in {source}: {first}")
        raise CliError(f"{source}: no Ray CR found")
    for label in skipped:
        note(f"{label}: not a Ray CR; skipped")
    for text in shapes:
        note(text)
    for label in suspended:
        note(f"{label}: spec.suspend is true: KubeRay creates no pods until it is resumed; its PodGroup is shown")
    return out


@app.command("podgroup")
def podgroup_cmd(
    filename: Annotated[
        str, typer.Option("-f", "--filename", help="Manifest file (multi-document YAML); '-' for stdin")
    ],
    output: Annotated[str, typer.Option("-o", "--output", help="yaml or json")] = "yaml",
    kai_defaults: Annotated[
        bool, typer.Option("--kai-defaults", help="KAI's priority defaults (every Ray kind -> train)")
    ] = False,
    queue_label_key: Annotated[str | None, typer.Option(help="Label key that names the queue")] = None,
    strict: StrictOpt = False,
) -> None:
    """Print the PodGroup(s) for the Ray CRs in the -f file ("-f -": stdin), as KAI's scheduling.run.ai/v2alpha2."""
    output = output_format(output, ("yaml", "json"))
    config = PodgrouperConfig.kai_compatible() if kai_defaults else PodgrouperConfig()
    if queue_label_key:
        config.queue_label_key = queue_label_key
    text, source = read_source(filename)
    groups = podgroups_from_text(text, source, config, strict)
    if output == "json":
        typer.echo(json.dumps(groups, indent=2))
    else:
        typer.echo(dump_yaml_all(groups))
