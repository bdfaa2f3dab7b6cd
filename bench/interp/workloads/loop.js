// Arithmetic in a hot loop (the interpreter's dispatch).
let s = 0;
for (let i = 0; i < 1e6; i++) s = (s + i * 7) % 1000003;
return s;
