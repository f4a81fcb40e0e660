"""ARC exactly as Figure 4 of Megiddo & Modha (FAST 2003) states it: a test oracle.

Written from the paper's pseudocode, case by case, with one ``request(x)``
operation and no knowledge of kvframe's five-operation interface, so that
``arc:variant=paper`` can be checked against it. Lists are ``OrderedDict``s
whose first entry is the LRU page. Pages are never pinned and never removed
other than by the algorithm.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable


class TextbookARC:
    def __init__(self, c: int) -> None:
        self.c = c
        self.p = 0
        self.T1: OrderedDict[Hashable, None] = OrderedDict()
        self.T2: OrderedDict[Hashable, None] = OrderedDict()
        self.B1: OrderedDict[Hashable, None] = OrderedDict()
        self.B2: OrderedDict[Hashable, None] = OrderedDict()

    def request(self, x: Hashable) -> bool:
        """Serve one request; True on a cache hit (x in T1 or T2)."""
        T1, T2, B1, B2, c = self.T1, self.T2, self.B1, self.B2, self.c
        # Case I: hit in the cache. Move x to the MRU position of T2.
        if x in T1 or x in T2:
            T1.pop(x, None)
            T2.pop(x, None)
            T2[x] = None
            return True
        # Case II: x in B1 (a page evicted from T1 too early). Favour recency.
        if x in B1:
            delta1 = 1 if len(B1) >= len(B2) else len(B2) / len(B1)
            self.p = min(self.p + delta1, c)
            self._replace(x)
            del B1[x]
            T2[x] = None
            return False
        # Case III: x in B2. Favour frequency.
        if x in B2:
            delta2 = 1 if len(B2) >= len(B1) else len(B1) / len(B2)
            self.p = max(self.p - delta2, 0)
            self._replace(x)
            del B2[x]
            T2[x] = None
            return False
        # Case IV: x is in none of the four lists.
        if len(T1) + len(B1) == c:  # Case A: L1 has exactly c pages.
            if len(T1) < c:
                B1.popitem(last=False)
                self._replace(x)
            else:  # B1 is empty: drop T1's LRU page from the cache, no ghost.
                T1.popitem(last=False)
        else:  # Case B: L1 has fewer than c pages.
            total = len(T1) + len(T2) + len(B1) + len(B2)
            if total >= c:
                if total == 2 * c:
                    B2.popitem(last=False)
                self._replace(x)
        T1[x] = None
        return False

    def _replace(self, x: Hashable) -> None:
        T1 = self.T1
        if T1 and ((x in self.B2 and len(T1) == self.p) or len(T1) > self.p):
            page, _ = T1.popitem(last=False)
            self.B1[page] = None
        else:
            page, _ = self.T2.popitem(last=False)
            self.B2[page] = None
