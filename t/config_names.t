#!/usr/bin/perl
# A zone's room to count rule names across reloads: laid out for the names
# its configuration gives it and a quarter more (64 at least), kept with the
# zone.  A reload that adds names within the room counts them; one that
# adds more keeps the zone's state, counts names up to the room, says so
# once, and still limits the rules of the names beyond; a restart lays the
# zone out for all of them.
use strict;
use warnings;
use FindBin;
use lib "$FindBin::Bin/lib";
use Test::More;
use RLTest;

my $t = RLTest->new();

# n locations with a rule of its own name each, in one 1m zone
sub body {
    my ($n) = @_;
    my $text = "ratelimit_zone z 1m;\nserver {\n    listen 127.0.0.1:%%PORT%%;\n"
        . "    location = /stats { ratelimit_stats; }\n";
    $text .= "    location /r$_/ { ratelimit zone=z key=\$http_x_k limit=2 period=1h name=r$_;"
        . " alias %%PREFIX%%/html/; }\n" for 1 .. $n;
    return $text . "}\n";
}

sub names { scalar grep { /^r\d+$/ } keys %{ $_[0]->stats->{zones}{z}{rules} } }

$t->write_conf(body(10));
$t->start();
is($t->statuses('/r1/index.html', 3, { 'X-K' => 'a' }), '200 200 429', 'r1 limits at 2');
is(names($t), 10, '10 names: each counted');

# within the room (64 at least): the added names counted, the state kept
$t->reload(body(60));
is(names($t), 60, 'a reload to 60 names: each counted');
is($t->statuses('/r1/index.html', 1, { 'X-K' => 'a' }), '429', 'and r1\'s key still spent');

# beyond the room: the state kept, 64 names counted, said once; the rules of
# the names beyond still limit
$t->reload(body(100));
is($t->statuses('/r1/index.html', 1, { 'X-K' => 'a' }), '429', 'a reload to 100 names: the state kept');
is(names($t), 64, 'the zone counts the 64 names of its room');
my @said = $t->error_log =~ /ratelimit_zone "z" keeps its state and its room to count 64 rule names: 100 names now, the names beyond are not counted in ratelimit_stats until a restart/g;
is(scalar @said, 1, 'said once, at the reload');
is($t->statuses('/r100/index.html', 3, { 'X-K' => 'a' }), '200 200 429', 'r100, not counted, limits at 2');

# a restart lays the zone out for every name
$t->stop();
$t->start();
$t->get("/r$_/index.html", { 'X-K' => 'b' }) for 1 .. 100;
is(names($t), 100, 'after a restart: all 100 names counted');
is($t->stats->{zones}{z}{rules}{r100}{allowed}, 1, 'r100 counted');

$t->stop();
done_testing();
