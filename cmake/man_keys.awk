# The rows of docs/reference/configuration.md (`sandboxd config
# reference`'s table) as a Markdown definition list, for sandboxd.conf(5):
# a table of four columns does not fit a terminal's 80. Run by
# cmake/man_page.cmake.
/^\| `/ {
	line = $0
	gsub(/\\\|/, "\001", line)             # an escaped '|' inside a cell
	line = substr(line, 3, length(line) - 4) # without "| " and " |"
	n = split(line, cell, / \| /)
	if (n != 4) {
		print "man_keys.awk: a row without 4 cells: " $0 > "/dev/stderr"
		exit 1
	}
	for (i = 1; i <= 4; i++)
		gsub(/\001/, "|", cell[i])
	printf "%s\n: %s.\n  Default: %s. Values: %s.\n\n", "**" substr(cell[1], 2, length(cell[1]) - 2) "**", cell[4], cell[2], cell[3]
	rows++
}
END {
	if (rows == 0) {
		print "man_keys.awk: no rows" > "/dev/stderr"
		exit 1
	}
}
