# softmax_base.png: why e? Left: the weights of one vector in bases 2, e
# and 10 (b^z/Σb^z = softmax(z·ln b)). Right: validation loss while
# training in each base (qkv ablate): a matched base, whose Wq and Wk
# start and learn at 1/√(ln b) of the usual size, lies on base e's curve.
# Variables: infile (softmax.csv from `qkv softmax --base 2,e,10 --csv`),
# vec (the vector, as 1;2;3), curves (ablate/curves.csv), seed, outfile.
load dir."/common.gp"
set terminal pngcairo size 1500,650 font "WenQuanYi Zen Hei,12" enhanced
set output outfile
set multiplot layout 1,2 title "为什么是 e：换底数只是换温度，权重能把它吸收掉" font ",16"
set style fill solid 0.8 border -1
set boxwidth 0.25
set xtics 1
set yrange [0:1]
set key top left
set title sprintf("z = [%s] 在不同底数下的权重 b^z/Σb^z", commas(vec))
# the components and half a bar's room each side, no empty places
set xrange [-0.6:components(vec) - 0.4]
set xlabel "分量 i"
set ylabel "权重"
at(dx) = strcol("vector") eq vec ? column("i") + dx : 1/0
plot infile using (at(-0.27)):"base_2" with boxes lc rgb "#9ecae1" title "底数 2", \
     infile using (at(0)):"base_e" with boxes lc rgb c_scaled title "底数 e", \
     infile using (at(0.27)):"base_10" with boxes lc rgb c_unscaled title "底数 10"
set autoscale x
set title sprintf("训练时的验证损失（种子 %s）", seed)
set xlabel "训练步数"
set ylabel "验证集交叉熵"
set autoscale y
set logscale y
set xtics autofreq
set key top right
sel(v, y) = (strcol("variant") eq v && strcol("seed") eq seed) ? y : 1/0
plot curves using "step":(sel("full", column("val_loss"))) with lines lw 4 lc rgb c_scaled \
         title "底数 e（完整模型）", \
     curves using "step":(sel("base-2", column("val_loss"))) with lines lw 2 lc rgb "#9ecae1" \
         title "底数 2", \
     curves using "step":(sel("base-10", column("val_loss"))) with lines lw 2 lc rgb c_unscaled \
         title "底数 10", \
     curves using "step":(sel("base-2-matched", column("val_loss"))) with points pt 6 ps 1.2 \
         lc rgb "#3182bd" title "底数 2，权重缩放 1/√ln2", \
     curves using "step":(sel("base-10-matched", column("val_loss"))) with points pt 2 ps 1.2 \
         lc rgb "#a50f15" title "底数 10，权重缩放 1/√ln10"
unset multiplot
