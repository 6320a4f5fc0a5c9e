"""The UCI data sets of the Feynman-Kac paper (Zhao et al., AISTATS 2024, Sec. 4.3 and App. C;
feynman-kac spec §6.3) and the per-data-set preprocessing of the paper's code, from a UCI file to
the clean table that :class:`lit_bayes.data.uci.UCICSV` reads.

The file is the UCI table with its columns in the UCI order (a header row unless ``header=False``;
every cell numeric except classification labels, which may be strings such as ionosphere's g/b):

* target column: the last one, except energy (column 9, the first target Y1; Y2 is dropped),
  naval (column 17, the compressor decay; the last column is dropped) and cancer (column 2, the
  diagnosis of wdbc.data; the id column is dropped); glass also drops its id column;
* features constant over the whole table are dropped (naval's two, ionosphere's second column);
* classification labels are mapped to 0..C-1 in sorted order (glass and satellite skip labels);
  satellite is the training and test files together (6435 rows).

:func:`write_clean_csv` writes the result with the header ``x1..xd,y``.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DATASETS", "UCISet", "preprocess", "read_rows", "write_clean_csv"]


@dataclass(frozen=True)
class UCISet:
    """One data set of spec §6.3: sizes, batch size, file layout and Table 3's OHSMC row."""

    task: str
    n: int
    d: int
    num_classes: int | None
    batch_size: int
    target: int = -1  # 0-based column of the target in the UCI file
    drop: tuple[int, ...] = ()  # 0-based columns that are neither target nor feature
    paper: tuple[tuple[float, float], tuple[float, float]] | None = None  # (NLPD, RMSE or ECE), (mean, std)


DATASETS = {
    "boston": UCISet("regression", 506, 13, None, 50),
    "concrete": UCISet("regression", 1030, 8, None, 50),
    "energy": UCISet("regression", 768, 8, None, 50, target=8, drop=(9,), paper=((0.92, 0.00), (0.09, 0.00))),
    "kin8": UCISet("regression", 8192, 8, None, 50),
    "naval": UCISet("regression", 11934, 14, None, 50, target=16, drop=(17,)),
    "yacht": UCISet("regression", 308, 6, None, 20, paper=((0.92, 0.00), (0.11, 0.04))),
    "power": UCISet("regression", 9568, 4, None, 50),
    "australian": UCISet("classification", 690, 14, 2, 50),
    "cancer": UCISet("classification", 569, 30, 2, 50, target=1, drop=(0,)),
    "ionosphere": UCISet("classification", 351, 33, 2, 20, paper=((0.21, 0.13), (0.08, 0.03))),
    "glass": UCISet("classification", 214, 9, 6, 20, drop=(0,)),
    "satellite": UCISet("classification", 6435, 36, 6, 50, paper=((0.27, 0.03), (0.03, 0.00))),
}

def read_rows(path: Path, delimiter: str, header: bool) -> list[list[str]]:
    """The data rows of ``path`` as stripped strings (blank lines skipped)."""
    if not path.is_file():
        raise ValueError(f"csv: no file at {str(path)!r}")
    with path.open(newline="") as handle:
        if delimiter == "whitespace":
            rows = [line.split() for line in handle]
        else:
            rows = [[cell.strip() for cell in row] for row in csv.reader(handle, delimiter=delimiter)]
    rows = [row for row in rows if any(row)]
    return rows[1:] if header else rows


def preprocess(spec: UCISet, rows: list[list[str]]) -> tuple[list[list[float]], list[float], int | None]:
    """Features, targets and number of classes of the UCI ``rows`` (spec §6.3, see the module doc)."""
    if not rows:
        raise ValueError("csv: the file has no data rows")
    width = len(rows[0])
    for i, row in enumerate(rows):
        if len(row) != width:
            raise ValueError(f"csv: data row {i + 1} has {len(row)} fields, the first has {width}")
    target = spec.target % width
    if width < 2 or any(c >= width for c in spec.drop) or target in spec.drop:
        raise ValueError(f"csv: {width} columns cannot hold this data set's target (column {target + 1}) and features")
    columns = [c for c in range(width) if c != target and c not in spec.drop]
    features = []
    for i, row in enumerate(rows):
        try:
            features.append([float(row[c]) for c in columns])
        except ValueError:
            bad = next(c for c in columns if not _is_number(row[c]))
            raise ValueError(f"csv: column {bad + 1} of data row {i + 1} holds {row[bad]!r}, features must be numeric") from None
    varying = [k for k in range(len(columns)) if len({f[k] for f in features}) > 1]
    features = [[f[k] for k in varying] for f in features]
    labels = [row[target] for row in rows]
    if spec.task == "regression":
        if not all(_is_number(v) for v in labels):
            raise ValueError(f"csv: the target column {target + 1} must be numeric for a regression set")
        return features, [float(v) for v in labels], None
    numeric = all(_is_number(v) for v in labels)
    classes = sorted(set(labels), key=float if numeric else str)
    index = {label: k for k, label in enumerate(classes)}
    return features, [float(index[v]) for v in labels], len(classes)


def _is_number(cell: str) -> bool:
    try:
        return math.isfinite(float(cell))
    except ValueError:
        return False


def write_clean_csv(path: Path, features: list[list[float]], targets: list[float], classification: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([f"x{k + 1}" for k in range(len(features[0]))] + ["y"])
        for f, y in zip(features, targets):
            writer.writerow([repr(v) for v in f] + [int(y) if classification else repr(y)])
