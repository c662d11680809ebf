import sys

g = [int(c) if c > "." else 0 for c in sys.stdin.read() if c in ".123456789"]
n = int(len(g) ** 0.5)
b = int(n ** 0.5)

def ok(i, v):
    for j in range(n * n):
        if g[j] == v and (j // n == i // n or j % n == i % n or (j // n // b, j % n // b) == (i // n // b, i % n // b)):
            return False
    return True

def solve():
    if 0 not in g:
        return True
    i = g.index(0)
    for v in range(1, n + 1):
        if ok(i, v):
            g[i] = v
            if solve():
                return True
    g[i] = 0
    return False

solve()
print("Answer:")
for r in range(n):
    print(*g[r * n:r * n + n])
