# softmax.png: linear z/Σz against softmax e^z/Σe^z for each vector.
# Variables: infile (from `qkv softmax --csv`), outfile, vecs ("1;2;3 -1;2;-0.5":
# each vector as the CSV writes it).
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
    z = commas(v)
    count = components(v)
    # a long vector (up to 32 numbers) would run its title into the next
    # panel's and its tick labels into each other: cut the one, thin the other
    if (strlen(z) > 30) {
        cut = 28 # at the last comma before it: no number cut in two
        while (cut > 1 && z[cut:cut] ne ",") { cut = cut - 1 }
        z = z[1:cut]." …"
    }
    set title sprintf("z = [%s]", z)
    if (count > 12) { set xtics autofreq } else { set xtics 1 }
    # the components and half a bar's room each side, no empty places
    set xrange [-0.6:count - 0.4]
    at(dx) = strcol("vector") eq v ? column("i") + dx : 1/0
    plot infile using (at(-0.18)):"linear" with boxes lc rgb c_unscaled title "线性 z/Σz", \
         infile using (at(0.18)):"softmax" with boxes lc rgb c_scaled title "Softmax e^z/Σe^z"
}
unset multiplot
