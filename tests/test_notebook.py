"""The quickstart notebook executes top to bottom."""

import os

import nbformat
from nbclient import NotebookClient

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_quickstart_notebook_runs():
    path = os.path.join(REPO, "notebooks", "quickstart.ipynb")
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": REPO}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert os.path.exists("/tmp/trace_jax_notebook/curves.png")
