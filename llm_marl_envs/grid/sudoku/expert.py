import sys

rows = [line.split() for line in sys.stdin.read().split("\n") if line.strip() and "-" not in line]
rows = [[x for x in row if x != "|"] for row in rows]
n = len(rows)
b = int(round(n ** 0.5))
grid = [[0 if x in ".0" else int(x) for x in row] for row in rows]

def ok(r, c, v):
    if any(grid[r][j] == v for j in range(n)) or any(grid[i][c] == v for i in range(n)):
        return False
    r0, c0 = r - r % b, c - c % b
    return all(grid[i][j] != v for i in range(r0, r0 + b) for j in range(c0, c0 + b))

def solve():
    for r in range(n):
        for c in range(n):
            if grid[r][c] == 0:
                for v in range(1, n + 1):
                    if ok(r, c, v):
                        grid[r][c] = v
                        if solve():
                            return True
                        grid[r][c] = 0
                return False
    return True

if solve():
    print("Answer:")
    for row in grid:
        print(" ".join(map(str, row)))
else:
    print("no solution")
