import sys
from collections import deque

rows = sys.stdin.read().rstrip("\n").split("\n")
walls, goals, boxes, player = set(), set(), set(), None
for r, line in enumerate(rows):
    for c, ch in enumerate(line):
        if ch == "#": walls.add((r, c))
        if ch in ".+*": goals.add((r, c))
        if ch in "$*": boxes.add((r, c))
        if ch in "@+": player = (r, c)
moves = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
start = (player, frozenset(boxes))
parent = {start: None}
queue = deque([start])
while queue:
    state = queue.popleft()
    (pr, pc), bx = state
    if bx == goals:
        path = []
        while parent[state] is not None:
            state, m = parent[state]
            path.append(m)
        print("Answer: " + "".join(reversed(path)))
        break
    for m, (dr, dc) in moves.items():
        p1 = (pr + dr, pc + dc)
        if p1 in walls:
            continue
        nb = bx
        if p1 in bx:
            p2 = (p1[0] + dr, p1[1] + dc)
            if p2 in walls or p2 in bx:
                continue
            nb = (bx - {p1}) | {p2}
        nxt = (p1, nb)
        if nxt not in parent:
            parent[nxt] = (state, m)
            queue.append(nxt)
else:
    print("no solution found")
