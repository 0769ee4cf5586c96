fn main() {
    println!("tarn");
}
