# Writes each ```cpp block of the Markdown files given to OUT/<file>_<n>.cpp (awk -v
# out=OUT), with a #line directive, so that a compiler error names the document's line.
FNR == 1 { n = 0; name = FILENAME; sub(/.*\//, "", name); sub(/\.md$/, "", name) }
/^```cpp[ \t]*$/ {
  file = out "/" name "_" ++n ".cpp"
  printf "#line %d \"%s\"\n", FNR + 1, FILENAME > file
  inside = 1
  next
}
inside && /^```/ { inside = 0; close(file); next }
inside { print > file }
