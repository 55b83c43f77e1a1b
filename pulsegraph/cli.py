"""The ``pulsegraph`` command: ``pulsegraph run`` starts the service.

Every flag is generated from :class:`~pulsegraph.settings.Settings`, so the CLI,
the environment variables and the defaults can never disagree; each flag's
help names its ``PULSEGRAPH_*`` variable. It configures the driver's logging
(:func:`pulsegraph.base.runtime.configure_logging`, which each actor calls for its own worker).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from pydantic import ValidationError

from pulsegraph.base.runtime import configure_logging
from pulsegraph.errors import ProduceError
from pulsegraph.produce import add_arguments as add_produce_arguments
from pulsegraph.produce import produce
from pulsegraph.settings import Settings

log = logging.getLogger("pulsegraph")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pulsegraph", description="A streaming graph service.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="start the pipeline and the API", description="Start the pipeline and the API.")
    for name, f in Settings.model_fields.items():
        default = f.default if f.default is not None else "none"
        # A boolean flag given alone means true: `--allow-anonymous-writes` as well as `--allow-anonymous-writes true`.
        alone: dict[str, Any] = {"nargs": "?", "const": "true"} if f.annotation is bool else {}
        run.add_argument(
            _flag(name),
            dest=name,
            default=argparse.SUPPRESS,
            metavar=name.upper(),
            # argparse %-formats help strings: a literal percent sign must be doubled.
            help=f"{f.description} (env PULSEGRAPH_{name.upper()}; default {default})".replace("%", "%%"),
            **alone,
        )
    produce = sub.add_parser(
        "produce", help="write events to a Kafka topic", description="Write events to a Kafka topic (creating it if needed)."
    )
    add_produce_arguments(produce)
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    given = {k: v for k, v in vars(args).items() if k != "command"}
    return Settings(**given)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "produce":
        configure_logging("INFO")
        try:
            stats = produce(args)
        except ProduceError as exc:
            print(f"pulsegraph produce: {exc}", file=sys.stderr)
            return 1
        return 1 if stats["errors"] else 0
    try:
        settings = settings_from(args)
    except ValidationError as exc:
        lines = [f"  {_flag(str(e['loc'][0])) if e['loc'] else ''}: {e['msg']}" for e in exc.errors()]
        print("pulsegraph: invalid settings\n" + "\n".join(lines), file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    if args.command == "run":
        from pulsegraph.service import serve

        return serve(settings)
    return 2


if __name__ == "__main__":
    sys.exit(main())
