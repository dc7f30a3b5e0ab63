"""Write the generated reference pages (run by the mkdocs-gen-files plugin at build time).

The CLI reference comes from the Click commands (``mkdocs-click``, in ``reference/cli.md``);
this script writes the configuration reference from the JSON Schemas, the built-in tools'
arguments and settings from the tools, and the Airflow reference from the operators.
"""

from __future__ import annotations

import sys
from pathlib import Path

import mkdocs_gen_files

sys.path.insert(0, str(Path(__file__).parent))

import airflow_pages
import schema_pages
import tool_pages

from runner.config.schema import schema

schemas = {name: schema(name) for name in schema_pages.PAGES}
for name in schema_pages.PAGES:
    with mkdocs_gen_files.open(f"reference/configuration/{name}.md", "w") as out:
        out.write(schema_pages.page(name, schemas[name], schemas))
with mkdocs_gen_files.open("reference/tools.md", "w") as out:
    out.write(tool_pages.page())
with mkdocs_gen_files.open("reference/airflow.md", "w") as out:
    out.write(airflow_pages.page())
