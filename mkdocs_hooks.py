"""mkdocs hooks for the docs site: README.md as the home page, and the figures the pages show from benchmarks/results/.

The pages stay readable on their own (GitHub, an editor): README.md links `docs/PAGE.md`, a page
links a figure as `../benchmarks/results/NAME.png`. For the site, README.md becomes `index.md`
with its `docs/` prefixes dropped, and each figure a page links is copied under
`benchmarks/results/` in the site, the page's link rewritten to it.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent
# A Markdown link or image to a file of the repo outside docs/: `](../PATH)`, an image only.
REPO_IMAGE = re.compile(r"\]\(\.\./((?:[\w.-]+/)*[\w.-]+\.(?:png|svg|jpg))\)")


def on_files(files: Files, config) -> Files:  # noqa: ANN001 (mkdocs' config type)
    readme = (ROOT / "README.md").read_text()
    files.append(File.generated(config, "index.md", content=re.sub(r"\]\(docs/", "](", readme)))
    docs = Path(config["docs_dir"])
    seen: set[str] = set()
    for page in docs.glob("*.md"):
        for rel in REPO_IMAGE.findall(page.read_text()):
            if rel not in seen and (ROOT / rel).is_file():
                seen.add(rel)
                files.append(File.generated(config, rel, abs_src_path=str(ROOT / rel)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001
    return REPO_IMAGE.sub(lambda m: f"]({m.group(1)})", markdown)
