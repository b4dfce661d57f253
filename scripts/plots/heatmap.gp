# heatmap.png: the trained model's attention matrix, tokens as labels.
# Variables: infile (from `qkv resolve --csv`), outfile.
load dir."/common.gp"
set terminal pngcairo size 1100,950 font "WenQuanYi Zen Hei,13" enhanced
set output outfile
# the sentence is whatever qkv resolve was given: its tokens head the columns
sentence = system("head -n 1 '".infile."' | cut -d, -f2- | tr -d ,")
# resolve takes up to 48 tokens: a long sentence, whole, ran off both
# edges of the title, so past 30 characters it is cut, with an ellipsis
if (strlen(sentence) > 30) { sentence = sentence[1:28]."……" }
set title "注意力权重：「".sentence."」（行：查询 Q，列：键 K）" font ",14"
set xlabel "键 key"
set ylabel "查询 query"
set yrange [*:*] reverse
set xtics rotate by -45 nomirror
set palette defined (0 "#ffffff", 0.5 "#6baed6", 1 "#08306b")
set cbrange [0:1]
set cblabel "softmax 权重"
unset grid
set view map
# a one-token sentence is a 1x1 matrix: 'with image' needs a 2x2 grid and
# left the PNG blank, and gnuplot reads no 1x1 matrix, so its one row is
# read as plain CSV and drawn as one box
tokens = int(system("head -n 1 '".infile."' | awk -F, '{ print NF - 1 }'"))
# past about 20 columns the slanted key labels run into each other: stand
# them upright, and past 30 shrink them and the numbers in the cells
cellfont = ",9"
if (tokens > 20) { set xtics rotate by -90 nomirror }
if (tokens > 30) { set xtics font ",10"; set ytics font ",10"; cellfont = ",7" }
if (tokens == 1) {
    set xrange [-0.5:0.5]
    set yrange [-0.5:0.5] reverse
    set xtics (sentence 0)
    set ytics (sentence 0)
    plot infile skip 1 using (0):(0):(0.5):(0.5):2 with boxxy fs solid fc palette notitle, \
         infile skip 1 \
            using (0):(0):($2 > 0.05 ? sprintf("%.2f", $2) : ""):($2 > 0.5 ? 0xffffff : 0xcc0000) \
            with labels font cellfont tc rgb variable notitle
} else {
    plot infile matrix rowheaders columnheaders using 1:2:3 with image, \
         infile matrix rowheaders columnheaders \
            using 1:2:($3 > 0.05 ? sprintf("%.2f", $3) : ""):($3 > 0.5 ? 0xffffff : 0xcc0000) \
            with labels font cellfont tc rgb variable
}
