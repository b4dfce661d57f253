# softmax.png: linear z/Σz against softmax e^z/Σe^z for each vector.
# Variables: infile (from `qkv softmax --csv`), outfile, vecs ("1,2,3 -1,2,-0.5").
load dir."/common.gp"
set terminal pngcairo size 1300,600 font "WenQuanYi Zen Hei,12" enhanced
set output outfile
n = words(vecs)
set multiplot layout 1,n title "为什么用 e^x：线性归一化会给出负“权重”，Softmax 不会" font ",16"
set style fill solid 0.8 border -1
set boxwidth 0.35
set xzeroaxis lt -1 lw 1.5
# bars start at 0 (a one-number vector's single bar of 1 too), and the
# tallest do not touch the frame
set yrange [*<0:0<*]
set offsets 0, 0, graph 0.06, graph 0.06
set xlabel "分量 i"
set ylabel "归一化结果"
set key top left
do for [k=1:n] {
    v = word(vecs, k)
    # a long vector (up to 32 numbers) would run its title into the next
    # panel's and its tick labels into each other: cut the one, thin the other
    set title sprintf("z = [%s]", strlen(v) > 24 ? v[1:21]."…" : v)
    count = 1
    do for [c=1:strlen(v)] { count = count + (v[c:c] eq ";") }
    if (count > 12) { set xtics autofreq } else { set xtics 1 }
    at(dx) = strcol("vector") eq v ? column("i") + dx : 1/0
    plot infile using (at(-0.18)):"linear" with boxes lc rgb c_unscaled title "线性 z/Σz", \
         infile using (at(0.18)):"softmax" with boxes lc rgb c_scaled title "Softmax e^z/Σe^z"
}
unset multiplot
