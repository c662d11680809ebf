import sys
from collections import deque

rows = [line for line in sys.stdin.read().split("\n") if line.strip()]
free, start, goal = set(), None, None
for r, line in enumerate(rows):
    for c, ch in enumerate(line.strip()):
        if ch != "#": free.add((r, c))
        if ch == "A": start = (r, c)
        if ch == "G": goal = (r, c)
moves = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
parent = {start: None}
queue = deque([start])
while queue:
    cur = queue.popleft()
    if cur == goal:
        path = []
        while parent[cur] is not None:
            cur, m = parent[cur]
            path.append(m)
        print("Answer: " + "".join(reversed(path)))
        break
    for m, (dr, dc) in moves.items():
        nxt = (cur[0] + dr, cur[1] + dc)
        if nxt in free and nxt not in parent:
            parent[nxt] = (cur, m)
            queue.append(nxt)
