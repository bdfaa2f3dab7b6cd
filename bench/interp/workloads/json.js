// Build 8000 small records, JSON.stringify them (about 0.9 MB) and parse the text back.
const rows = [];
for (let i = 0; i < 8000; i++) {
  rows.push({id: i, name: 'item-' + i, tags: ['alpha', 'beta', 'gamma'], score: i * 1.25,
             nested: {ok: i % 2 === 0, path: '/srv/data/' + i, when: '2026-11-22T10:00:00Z'}});
}
const text = JSON.stringify(rows);
const back = JSON.parse(text);
return [text.length, back.length];
