"""`ctxnmt judge create|serve|report`: a blind pairwise ranking study from start to table."""
from __future__ import annotations

import sys

from ctxnmt.data.corpus import read_lines
from ctxnmt.judge.report import format_csv, format_markdown, overall_agreement, report_rows
from ctxnmt.judge.server import make_server
from ctxnmt.judge.study import System, create_study, meta, open_study, parse_system
from ctxnmt.utils.arguments import add_input, add_output, add_ref
from ctxnmt.utils.io import atomic_write


def register(sub) -> None:
    p = sub.add_parser("judge",
                       description="A blind pairwise ranking study of system outputs by human judges, from the "
                                   "sample to the table (docs/human-evaluation.md).")
    inner = p.add_subparsers(dest="judge_command", required=True, metavar="ACTION")

    c = inner.add_parser("create", help="sample items and write a new study file (SQLite)",
                         description="Sample source sentences, pair every two systems' outputs of each in a random "
                                     "left/right order, and write them to a new study file (SQLite).")
    add_input(c, "source text, one sentence per line", "--src", dest="src", required=True)
    add_ref(c, "reference translations, shown to the judges when given")
    c.add_argument("--system", action="append", required=True, metavar="NAME=FILE",
                   help="a system's output, line-aligned with --src; two or more (every pair is judged)")
    c.add_argument("--n", type=int, default=50, help="source sentences sampled (default 50, as in the papers)")
    c.add_argument("--seed", type=int, default=1, help="seed of the sample and of the left/right sides")
    add_output(c, "the study file to create (never overwritten)", metavar="STUDY", required=True)
    c.set_defaults(func=cmd_create)

    s = inner.add_parser("serve", help="the judging web page for a study",
                         description="Serve a study's judging page: each judge ranks the pairs of outputs they are "
                                     "shown, and every answer is saved in the study file as it is given.")
    s.add_argument("study", metavar="STUDY", help="the study file that ctxnmt judge create wrote")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8765, help="port (0: any free port; the URL is printed)")
    s.set_defaults(func=cmd_serve)

    r = inner.add_parser("report", help="per pair %% higher / equal / lower, sign test, agreement",
                         description="Report a study's answers: per pair of systems how often one was ranked "
                                     "higher, equal or lower, a sign test, and the judges' agreement.")
    r.add_argument("study", metavar="STUDY", help="the study file that ctxnmt judge create wrote")
    r.add_argument("--format", choices=("md", "csv"), default="md", help="a Markdown table (default) or CSV")
    add_output(r, "write the report here (atomically) instead of stdout")
    r.set_defaults(func=cmd_report)


def cmd_create(args) -> int:
    src = read_lines(args.src)
    ref = read_lines(args.ref) if args.ref else None
    systems = []
    for spec in args.system:
        name, path = parse_system(spec)
        systems.append(System(name, path, read_lines(path, allow_empty=True)))
    counts = create_study(args.output, src, ref, systems, args.n, args.seed, args.src, args.ref)
    print(f"{args.output}: {counts['segments']} sentences × {counts['pairs']} pairs = {counts['items']} items, "
          f"{counts['identical']} with identical outputs (not shown, reported apart)")
    return 0


def cmd_serve(args) -> int:
    server = make_server(args.study, args.host, args.port)
    host, port = server.server_address[:2]
    print(f"judging {args.study} at http://{host}:{port}/ (Ctrl-C stops; answers are saved as given)", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


def cmd_report(args) -> int:
    with open_study(args.study) as db:
        rows = report_rows(db)
        text = format_csv(rows) if args.format == "csv" else format_markdown(rows, meta(db), overall_agreement(db))
    if args.output:
        with atomic_write(args.output, "w") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 0
