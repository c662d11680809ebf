import sys
g = sys.stdin.read().split()
f = {(r, c): x for r, row in enumerate(g) for c, x in enumerate(row)}
s = [p for p in f if f[p] == "A"][0]
q, seen = [(s, "")], {s}
for p, m in q:
    if f[p] == "G":
        print("Answer: " + m)
        break
    for d, a, b in (("U", -1, 0), ("D", 1, 0), ("L", 0, -1), ("R", 0, 1)):
        n = (p[0] + a, p[1] + b)
        if f.get(n, "#") != "#" and n not in seen:
            seen.add(n)
            q.append((n, m + d))
