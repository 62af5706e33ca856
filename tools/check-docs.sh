#!/bin/bash
# Checks that the manual still covers the extension and that its links hold.
#
#   bash tools/check-docs.sh        (from anywhere; exit 0 when all is well)
#
# 1. Every function, procedure and view the SQL scripts create in schema
#    tsmove (control/pg_tsmove--*.sql, upgrade scripts included, less what a
#    later script drops for good) and every GUC src/ defines
#    (DefineCustom*Variable("pg_tsmove.*")) is named, qualified
#    (tsmove.NAME, pg_tsmove.NAME), in a table row of README.md and in
#    doc/reference.md.
# 2. Every relative link in README.md and doc/*.md points at a file that
#    exists, and its #anchor, when the target is Markdown, at a heading.
# 3. No table separator line (|---|---|) stands without its header row.
# 4. README.md stays within 40 000 bytes (issue 29).
#
# Prints each problem on a line of its own and exits 1 if there is any.
# Needs bash and python3 only; runs in well under a second.
cd "$(dirname "$0")/.." || exit 2
exec python3 - <<'EOF'
import glob, os, re, sys

problems = []

# --- 1. names -------------------------------------------------------------

def version_key(path):
    # pg_tsmove--0.1.sql -> (0,1); pg_tsmove--0.1--0.2.sql -> (0,2): the
    # version a script leaves the extension at, base scripts first.
    versions = re.findall(r'--([0-9][0-9.]*?)(?=--|\.sql$)', os.path.basename(path))
    last = tuple(int(x) for x in versions[-1].split('.'))
    return (last, len(versions))

sql_names = {}          # name -> kind, as left by the last script
ddl = re.compile(r'\b(CREATE(?:\s+OR\s+REPLACE)?|DROP)\s+(FUNCTION|PROCEDURE|VIEW)\s+'
                 r'(?:IF\s+EXISTS\s+)?tsmove\.(\w+)', re.I)
scripts = sorted(glob.glob('control/pg_tsmove--*.sql'), key=version_key)
if not scripts:
    problems.append('no control/pg_tsmove--*.sql found')
for path in scripts:
    text = open(path, encoding='utf-8').read()
    text = re.sub(r'--[^\n]*', '', re.sub(r'/\*.*?\*/', '', text, flags=re.S))
    for verb, kind, name in ddl.findall(text):
        if verb.upper().startswith('CREATE'):
            sql_names[name] = kind.lower()
        else:
            sql_names.pop(name, None)

gucs = set()
for path in glob.glob('src/**/*.c', recursive=True):
    text = open(path, encoding='utf-8').read()
    gucs.update(re.findall(r'DefineCustom\w*Variable\(\s*"pg_tsmove\.(\w+)"', text))
if not gucs:
    problems.append('no DefineCustom*Variable("pg_tsmove.*") found in src/')

readme = open('README.md', encoding='utf-8').read()
readme_rows = '\n'.join(l for l in readme.splitlines() if l.lstrip().startswith('|'))
try:
    reference = open('doc/reference.md', encoding='utf-8').read()
except OSError:
    reference = ''
    problems.append('doc/reference.md is missing')

def named(text, qualified):
    return re.search(re.escape(qualified) + r'(?!\w)', text) is not None

for name, kind in sorted(sql_names.items()):
    q = 'tsmove.' + name
    if not named(readme_rows, q):
        problems.append(f'README.md: {kind} {q} is in no table')
    if reference and not named(reference, q):
        problems.append(f'doc/reference.md: {kind} {q} is not described')
for name in sorted(gucs):
    q = 'pg_tsmove.' + name
    if not named(readme_rows, q):
        problems.append(f'README.md: GUC {q} is in no table')
    if reference and not named(reference, q):
        problems.append(f'doc/reference.md: GUC {q} is not described')

# --- 2. links, 3. orphan separators ---------------------------------------

def slug(heading):
    # GitHub's anchors: markup and punctuation dropped, lower case, spaces
    # to hyphens.
    h = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', heading.strip())
    h = re.sub(r'[^\w\- ]', '', h.replace('`', '').replace('*', '').lower())
    return h.replace(' ', '-')

def lines_outside_code(text):
    # (number, line) of the lines outside fenced code blocks.
    fence = False
    for n, line in enumerate(text.splitlines(), 1):
        if re.match(r'\s*(```|~~~)', line):
            fence = not fence
        elif not fence:
            yield n, line

anchor_cache = {}

def anchors(path):
    if path not in anchor_cache:
        seen = {}
        for _, line in lines_outside_code(open(path, encoding='utf-8').read()):
            m = re.match(r'#{1,6}\s+(.*?)\s*#*\s*$', line)
            if m:
                base = slug(m.group(1))
                seen[base] = seen.get(base, -1) + 1
                seen[f'{base}-{seen[base]}' if seen[base] else base] = 0
        anchor_cache[path] = set(seen)
    return anchor_cache[path]

separator = re.compile(r'\|?(\s*:?-{3,}:?\s*\|)+\s*:?-*:?\s*')
for doc in ['README.md'] + sorted(glob.glob('doc/*.md')):
    text = open(doc, encoding='utf-8').read()
    # inline code blanked: a `](x)` in it is no link
    lines = {n: re.sub(r'`[^`]*`', '``', l) for n, l in lines_outside_code(text)}
    for n, line in lines.items():
        if separator.fullmatch(line.strip()) and '|' in line:
            prev = lines.get(n - 1, '')
            if '|' not in prev:
                problems.append(f'{doc}:{n}: table separator without a header row')
    # [text](target), the text possibly over several lines: match the tail.
    for n, line in lines.items():
        for target in re.findall(r'\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)', line):
            if re.match(r'[a-z][a-z0-9+.-]*:', target, re.I):
                continue        # http:, https:, mailto:
            path, _, frag = target.partition('#')
            dest = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
            if not os.path.exists(dest):
                problems.append(f'{doc}:{n}: link to {target}: {dest} does not exist')
            elif frag and dest.endswith('.md') and frag not in anchors(dest):
                problems.append(f'{doc}:{n}: link to {target}: no heading #{frag} in {dest}')

# --- 4. size --------------------------------------------------------------

size = os.path.getsize('README.md')
if size > 40000:
    problems.append(f'README.md is {size} bytes, more than 40000')

for p in problems:
    print('check-docs: ' + p)
if problems:
    sys.exit(1)
print(f'check-docs: ok ({len(sql_names)} functions and views, {len(gucs)} GUCs, '
      f'links of {1 + len(glob.glob("doc/*.md"))} files; README.md {size} bytes)')
EOF
